"""The drift watch's window: the last N complete lines of a log that is still being written."""

import pytest

from quantgate.tasks.calibrate import window as window_module
from quantgate.tasks.calibrate.window import cut_window, last_complete_lines


def _log(path, n, tail=b""):
    path.write_bytes(b"".join(b'{"id": %d}\n' % i for i in range(n)) + tail)
    return path


def test_a_line_still_being_written_is_left_for_the_next_look(tmp_path):
    log = _log(tmp_path / "t.jsonl", 10, tail=b'{"id": 10, "request": {"mo')
    lines, tail = last_complete_lines(log, 3)
    assert lines == [b'{"id": 7}', b'{"id": 8}', b'{"id": 9}']
    assert tail == len(b'{"id": 10, "request": {"mo')


def test_reading_backwards_across_chunks_keeps_whole_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(window_module, "_CHUNK", 7)  # chunks end mid-line, many times over
    log = _log(tmp_path / "t.jsonl", 50)
    lines, tail = last_complete_lines(log, 12)
    assert lines == [b'{"id": %d}' % i for i in range(38, 50)] and tail == 0
    assert last_complete_lines(log, 500)[0] == [b'{"id": %d}' % i for i in range(50)]


def test_blank_lines_do_not_count_and_no_newline_means_nothing_complete(tmp_path):
    log = tmp_path / "t.jsonl"
    log.write_bytes(b'{"id": 1}\n\n\n{"id": 2}\n')
    assert last_complete_lines(log, 5) == ([b'{"id": 1}', b'{"id": 2}'], 0)
    log.write_bytes(b'{"id": 1, "half')
    assert last_complete_lines(log, 5) == ([], len(b'{"id": 1, "half'))
    with pytest.raises(ValueError, match="no complete line"):
        cut_window(log, 5, tmp_path / "w")


def test_the_same_window_is_the_same_file_and_new_lines_make_a_new_one(tmp_path):
    log = _log(tmp_path / "t.jsonl", 20, tail=b"{partial")
    a, b = cut_window(log, 8, tmp_path / "w"), cut_window(log, 8, tmp_path / "w")
    assert a == b and a.requests == 8 and a.partial_tail_bytes == len(b"{partial")
    assert (tmp_path / "w" / f"{a.digest}.jsonl").read_bytes().count(b"\n") == 8
    _log(log, 21)
    c = cut_window(log, 8, tmp_path / "w")
    assert c.digest != a.digest and c.partial_tail_bytes == 0
    with pytest.raises(FileNotFoundError, match="traffic.path"):
        cut_window(tmp_path / "missing.jsonl", 8, tmp_path / "w")
