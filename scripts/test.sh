#!/usr/bin/env bash
# `make test`: the quality gates (`make check`), the other ansible-core versions (`make compat`) and every unit and
# integration test (pytest), with the gates beside pytest instead of before it.
#
# The three are independent: the gates and compat write under build/ (ignored by git, the sanity copies and the
# collection build), compat's lab and molecule runs have HOMEs of their own, and ansible-test's cache in HOME is kept
# per ansible-core and Python. On CI's 2 cores pytest alone leaves CPU time unused (its site tests wait on polls and
# fake pods; docs/readings/test-time-session8.md): beside it, the gates use that time instead of adding their own.
# pytest's output streams as before; each gate's output goes to build/test-logs/<gate>.log, and after pytest's summary
# one line per gate says whether it passed (a failed gate's log tail is printed). The exit status is 1 when pytest or
# any gate failed. Arguments are pytest's (`make test ARGS=...`).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=.venv/bin
LOGS=build/test-logs
GATES=(check compat)
rm -rf "$LOGS"
mkdir -p "$LOGS"

declare -A pids
# shellcheck disable=SC2317  # (called from the trap below)
stop_gates() {
    # each gate runs in its own process group (set -m below): stop the whole group, make and what it started
    for gate in "${GATES[@]}"; do
        [ -n "${pids[$gate]:-}" ] && kill -TERM -- "-${pids[$gate]}" 2>/dev/null
    done
}
trap 'stop_gates; exit 130' INT TERM

set -m
for gate in "${GATES[@]}"; do
    (
        start=$(date +%s)
        # -k: every gate of `make check` runs even after one failed, so one run shows them all; nice: pytest's
        # workers come first, the gates take the CPU time they leave (the site tests wait on polls and fake pods)
        nice -n 10 make -k --no-print-directory "$gate" >"$LOGS/$gate.log" 2>&1 </dev/null
        rc=$?
        echo "$rc $(( $(date +%s) - start ))" >"$LOGS/$gate.status"
        exit "$rc"
    ) &
    pids[$gate]=$!
done
set +m
echo "test: make ${GATES[*]} running beside pytest (logs: $LOGS/)"

"$BIN/python" -m pytest -n 2 --dist worksteal "$@"
status=$?

for gate in "${GATES[@]}"; do
    wait "${pids[$gate]}"
    read -r rc seconds <"$LOGS/$gate.status" 2>/dev/null || { rc=1; seconds="?"; }
    if [ "$rc" -eq 0 ]; then
        echo "test: make $gate passed (in ${seconds} s, beside pytest; log: $LOGS/$gate.log)"
    else
        echo "test: make $gate FAILED (exit $rc after ${seconds} s; log: $LOGS/$gate.log); its last lines:"
        tail -n 60 "$LOGS/$gate.log" | sed 's/^/    /'
        status=1
    fi
done
[ "$status" -eq 0 ] || echo "test: FAILED"
exit "$status"
