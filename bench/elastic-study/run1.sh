#!/bin/bash
# usage: run1.sh PSPORT WPORT PSBOOT PSJOB MODE [WBOOT]
cd "$(dirname "$0")"; mkdir -p logs
PY="$(git rev-parse --show-toplevel)/.venv/bin/python"
PS_SECONDS=${PS_SECONDS:-12} nice -n 10 $PY lead1.py ps $1 $3 > logs/ps_$1.log 2>&1 &
PSPID=$!
for i in $(seq 60); do grep -q "PS ready" logs/ps_$1.log && break; sleep 0.5; done
WBOOT=${6:-worker} timeout 40 nice -n 10 $PY lead1.py worker $2 $1 $4 $5 > logs/w_$2.log 2>&1
grep RESULT logs/w_$2.log || tail -5 logs/w_$2.log
kill $PSPID 2>/dev/null; wait $PSPID 2>/dev/null
grep -v "^WARNING\|^I0000\|^E0000" logs/ps_$1.log | tail -3
