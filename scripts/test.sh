#!/usr/bin/env bash
# `make test`: the quality gates (`make check`), the other ansible-core versions (`make compat`) and every unit and
# integration test (pytest), with the gates beside pytest instead of before it.
#
# The three are independent: the gates and compat write under build/ (ignored by git, the sanity copies and the
# collection build), compat's lab and molecule runs have HOMEs of their own, and ansible-test's cache in HOME is kept
# per ansible-core and Python. On CI's 2 cores pytest alone leaves CPU time unused (its site tests wait on polls and
# fake pods; in git history: docs/readings/test-time-session8.md at 87479e5): beside it, the gates use that time
# instead of adding their own.
# pytest's output streams as before; each gate's output goes to build/test-logs/<gate>.log, and after pytest's summary
# one line per gate says whether it passed (a failed gate's log tail is printed). The exit status is 1 when pytest or
# any gate failed. Arguments are pytest's (`make test ARGS=...`).
#
# The budget (issue 49), a reading and never a check: two lines "test: budget: ..." at the end give the wall time, the
# CPU seconds of pytest (its workers and the ansible runs they waited for) and of each gate, and a fixed CPU loop's
# time before and after (the machine's speed), so that a slow machine and a slow suite can be told apart; the same in
# build/test-logs/budget.json, the per-file costs in build/test-logs/test-costs.md (scripts/test_budget.py,
# tests/support/cost_table.py). They are printed after a failure or Ctrl-C too, and change no exit status.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=.venv/bin
LOGS=build/test-logs
GATES=(check compat)
rm -rf "$LOGS"
mkdir -p "$LOGS"
started=$(date +%s)
pytest_started="" pytest_ended="" pytest_status=""
probe_before=$("$BIN/python" scripts/test_budget.py probe 2>/dev/null)   # before the gates start: an idle machine

budget() {
    # $1: finished or interrupted (Ctrl-C: what was measured so far, no probe after); what it cannot read it prints
    # as "?", and its own failure is a message, never the run's exit status
    "$BIN/python" scripts/test_budget.py report --state "$1" --logs "$LOGS" --started "$started" \
        --pytest-started "$pytest_started" --pytest-ended "$pytest_ended" --pytest-exit "$pytest_status" \
        --probe-before "$probe_before" --gates "${GATES[@]}" ||
        echo "test: budget: not measured (scripts/test_budget.py failed)"
}

declare -A pids
# shellcheck disable=SC2317  # (called from the trap below)
stop_gates() {
    # each gate runs in its own process group (set -m below): stop the whole group, make and what it started
    for gate in "${GATES[@]}"; do
        [ -n "${pids[$gate]:-}" ] && kill -TERM -- "-${pids[$gate]}" 2>/dev/null
    done
}
trap 'stop_gates; budget interrupted; exit 130' INT TERM

set -m
for gate in "${GATES[@]}"; do
    (
        start=$(date +%s)
        # -k: every gate of `make check` runs even after one failed, so one run shows them all; nice: pytest's
        # workers come first, the gates take the CPU time they leave (the site tests wait on polls and fake pods)
        nice -n 10 make -k --no-print-directory "$gate" >"$LOGS/$gate.log" 2>&1 </dev/null
        rc=$?
        times >"$LOGS/$gate.times"      # its second line: the CPU time of make and all it waited for
        echo "$rc $(( $(date +%s) - start ))" >"$LOGS/$gate.status"
        exit "$rc"
    ) &
    pids[$gate]=$!
done
set +m
echo "test: make ${GATES[*]} running beside pytest (logs: $LOGS/)"

pytest_started=$(date +%s)
# in a subshell whose `times` is the CPU time of pytest's process tree alone (the gates are not its children)
("$BIN/python" -m pytest -n 2 --dist worksteal "$@"; rc=$?; times >"$LOGS/pytest.times"; exit "$rc")
status=$?
pytest_status=$status pytest_ended=$(date +%s)

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
budget finished
[ "$status" -eq 0 ] || echo "test: FAILED"
exit "$status"
