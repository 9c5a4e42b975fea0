#!/bin/bash
cd "$(dirname "$0")"; mkdir -p logs; PY="$(git rev-parse --show-toplevel)/.venv/bin/python"; B=$1
nice -n 10 $PY lead1b.py ps $B > logs/l1b_ps_$B.log 2>&1 & P=$!
for i in $(seq 80); do grep -q "PS ready" logs/l1b_ps_$B.log && break; sleep 0.5; done
PID=$(grep "PS ready" logs/l1b_ps_$B.log | awk '{print $3}')
timeout 90 nice -n 10 $PY lead1b.py client $B $2 $3 $PID 2>&1 | grep RESULT
kill $P; wait $P 2>/dev/null
