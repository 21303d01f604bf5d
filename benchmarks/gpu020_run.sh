#!/bin/bash
# One device call after parts 0-2 of ../shared/gpu/stage.sh are in /root/stage (this call copies the last, part.3):
# setup.sh (vLLM 0.20.2's CUDA build and the checkout's patchkit into the image's Python), then the campaign
# (benchmarks/gpu_campaign.py), all ending before TOTAL seconds. The device gives back at most 8 files from $OUT:
# everything goes back as one archive, all.tgz, with the campaign's cumulative results (results-all.jsonl).
# Carry: .gpu/part.3 .gpu/setup.sh; run: TOTAL=570 JOBS=15 ONLY=case:compiled-bf16,... bash benchmarks/gpu020_run.sh
# Env: STATE (gpu_campaign --state, /root/c020), TOTAL (s), JOBS, ONLY, RIGHT_CASES (native on 0.20.2: llama).
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
mkdir -p /root/stage && cp .gpu/part.3 /root/stage/
bash .gpu/setup.sh > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
echo "setup done $(( $(date +%s) - T0 )) s"; tail -3 $OUT/setup.log
nvidia-smi --query-gpu=name,memory.free --format=csv,noheader; nproc
python3 benchmarks/gpu_campaign.py --state ${STATE:-/root/c020} --out $OUT --deadline $(( ${TOTAL:-570} - ($(date +%s) - T0) )) \
  --jobs ${JOBS:-15} --right-cases ${RIGHT_CASES:-llama} --only "$ONLY" > $OUT/campaign.log 2>&1
echo "campaign exit $? at $(( $(date +%s) - T0 )) s"
grep -E "exit [0-9]+ ok=|setup error|deadline" $OUT/campaign.log | tail -20
cp "${STATE:-/root/c020}/results.jsonl" "$OUT/results-all.jsonl" 2>/dev/null
tar czf /tmp/gpu020-out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu020-out.tgz "$OUT/all.tgz"
echo "total $(( $(date +%s) - T0 )) s"
