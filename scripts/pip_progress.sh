#!/usr/bin/env bash
# scripts/pip_progress.sh CMD...: runs CMD (a pip install) with its whole output in a log, showing one
# line per package it collects or builds, and a line every 30 s while it is otherwise silent: pip -q
# said nothing for minutes (the judge's llama.cpp compile alone is ~5 min on 2 cores). On failure
# the log's last 60 lines are shown.
set -u
log=$(mktemp -t pip-XXXXXX.log)
"$@" >"$log" 2>&1 &
pid=$!
start=$SECONDS
(
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30 >/dev/null 2>&1  # not holding our stdout: a pipe after us must not wait for it
    kill -0 "$pid" 2>/dev/null && echo "  ... still installing ($((SECONDS - start)) s so far; full log: $log)"
  done
) &
ticker=$!
tail -n +1 -f --pid="$pid" "$log" |
  grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed| *Building wheel for)' |
  sed -u -E 's/^(.{157}).+/\1.../'  # unbuffered, whole lines: the heartbeat must not land mid-line
wait "$pid"
rc=$?
kill "$ticker" 2>/dev/null
if [ "$rc" -ne 0 ]; then
  echo "pip failed (exit $rc); the last lines of $log:"
  tail -n 60 "$log"
fi
exit "$rc"
