#!/usr/bin/env bash
# scripts/pip_progress.sh CMD...: runs CMD (a pip install) with its whole output in a log, showing one
# line per package it collects or builds and a heartbeat every 30 s, so a long silent step (the
# judge's llama.cpp compile is ~5 min on 2 cores) still shows progress; pip -q said nothing for
# minutes. On failure the log's last 60 lines are shown; on success the log is removed.
# PIP_PROGRESS_TAG=name prefixes every line with "[name] " (two installs side by side, `make install`).
set -u
tag=${PIP_PROGRESS_TAG:+[$PIP_PROGRESS_TAG] }
if [ "$#" -eq 0 ]; then
  echo "usage: $0 CMD [ARGS...]   (e.g. $0 python -m pip install -e .)" >&2
  exit 2
fi
log=$(mktemp -t pip-XXXXXX.log)
setsid "$@" >"$log" 2>&1 &  # its own process group: Ctrl-C below takes pip and its compilers down
pid=$!
start=$SECONDS
(
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30 >/dev/null 2>&1  # not holding our stdout: a pipe after us must not wait for it
    kill -0 "$pid" 2>/dev/null && echo "$tag  ... still installing ($((SECONDS - start)) s so far; full log: $log)"
  done
) &
ticker=$!
trap 'kill -TERM -- -"$pid" "$ticker" 2>/dev/null; echo "interrupted; pip log: $log"; exit 130' INT TERM HUP
# The viewer runs in the background too: bash runs a trap only once the foreground command ends,
# and `wait` is what a signal interrupts.
tail -n +1 -f --pid="$pid" "$log" |
  grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed| *Building wheel for)' |
  sed -u -E 's/^(.{157}).+/\1.../' | sed -u "s|^|$tag|" &  # unbuffered, whole lines: the heartbeat must not land mid-line
viewer=$!
wait "$pid"
rc=$?
wait "$viewer"  # tail follows until pip has exited: every line is out before the verdict
kill "$ticker" 2>/dev/null
if [ "$rc" -ne 0 ]; then
  echo "${tag}pip failed (exit $rc); the last lines of $log:"
  tail -n 60 "$log"
else
  rm -f "$log"
fi
exit "$rc"
