#!/bin/bash
# usage: run2.sh BASEPORT SLOTS MODE ABSENT
cd "$(dirname "$0")"; mkdir -p logs; PY="$(git rev-parse --show-toplevel)/.venv/bin/python"
L=logs/l2_$1
PS_SECONDS=40 nice -n 10 $PY lead2.py ps $1 $2 $3 0 $4 > ${L}_ps.log 2>&1 & P=$!
for i in $(seq 80); do grep -q "PS ready" ${L}_ps.log && break; sleep 0.5; done
nice -n 10 timeout 50 $PY lead2.py worker $1 $2 $3 0 $4 > ${L}_w0.log 2>&1 & A=$!
nice -n 10 timeout 50 $PY lead2.py worker $1 $2 $3 1 $4 > ${L}_w1.log 2>&1 & B=$!
wait $A $B
grep -h RESULT ${L}_w0.log ${L}_w1.log || tail -3 ${L}_w0.log
kill $P 2>/dev/null; wait $P 2>/dev/null
