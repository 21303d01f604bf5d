#!/bin/bash
# One device call after the 55 parts of ../shared/gpu/stage034.sh are in /root/stage034: setup034.sh, the
# checkout's patchkit wheel (.whl/, carried), two DFlash rehearsals of a patched GLM-4.5-Air (eager, compiled) and
# the 0.34.0 campaign, side by side, all ending before TOTAL seconds (the call's limit less a margin).
# Carry: .gpu034/part.54 .gpu034/setup034.sh .gpu034/SHA256SUMS .whl; run: TOTAL=580 bash benchmarks/gpu034_run.sh
# Env: STATE (gpu_campaign --state, /root/c034), TOTAL (s), JOBS, ONLY (gpu_campaign --only items), RIGHT_CASES (rehearsed right only: native there),
# DFLASH ("eager compiled" when unset, "" for none: on 2026-12-07 `${DFLASH:-...}` ran both for DFLASH="").
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
bash .gpu034/setup034.sh > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
echo "setup done $(( $(date +%s) - T0 )) s"; tail -3 $OUT/setup.log
PY=/root/v034/bin/python3
$PY -m pip install -q --no-index --no-deps --force-reinstall .whl/*.whl > $OUT/pip.log 2>&1; tail -2 $OUT/pip.log
PK=/root/v034/bin/patchkit
nvidia-smi --query-gpu=name,memory.free --format=csv,noheader; nproc
$PY -c 'import pathlib,sys; sys.path.insert(0,"tests"); from engine_models import GLM45_AIR as T, GLM45_AIR_DFLASH as D, write_checkpoint as w; w(pathlib.Path("/root/dflash/GLM-4.5-Air"),T); w(pathlib.Path("/root/dflash/GLM-4.5-Air-DFlash"),D)'
$PK apply --target vllm --python $PY --arch Glm4MoeForCausalLM > $OUT/dflash-apply.txt 2>&1; echo "dflash apply exit $?"
for p in ${DFLASH-eager compiled}; do  # DFLASH="" runs none (unset: both)
  extra=""; [ $p = eager ] && extra="--eager"
  ( s=$(date +%s); timeout $(( ${TOTAL:-580} - ($(date +%s) - T0) )) $PK rehearse --model /root/dflash/GLM-4.5-Air --draft /root/dflash/GLM-4.5-Air-DFlash --python $PY --device cuda $extra --json > $OUT/dflash-$p.json 2> $OUT/dflash-$p.err; echo "dflash $p exit $? in $(( $(date +%s) - s )) s" >> $OUT/dflash-exit.txt ) &
done
export PATCHKIT_ENGINE_ARGS='{"additional_config":{"gdn_prefill_backend":"triton"}}'
$PY benchmarks/gpu_campaign.py --state ${STATE:=/root/c034} --out $OUT --deadline $(( ${TOTAL:-580} - ($(date +%s) - T0) )) --jobs ${JOBS:-11} --hybrids '' \
  --right-cases ${RIGHT_CASES:-granite-moe,qwen3-next} \
  --only ${ONLY:-gemma3-mm:compiled-bf16,exaone4:compiled-bf16,mixtral:compiled-bf16,ernie45-moe:compiled-bf16,granite-moe:compiled-bf16,qwen3-next:compiled-bf16} \
  > $OUT/campaign.log 2>&1
echo "campaign exit $? at $(( $(date +%s) - T0 )) s"
wait
cat $OUT/dflash-exit.txt
grep -E "exit [0-9]+ ok=" $OUT/campaign.log | tail -20
echo "total $(( $(date +%s) - T0 )) s"
# the device gives back at most 8 files from $OUT (on 2026-12-07 results.jsonl was left out): one archive of all,
# with the campaign's cumulative results
cp "$STATE/results.jsonl" "$OUT/results-all.jsonl" 2>/dev/null
tar czf /tmp/gpu034-out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu034-out.tgz "$OUT/all.tgz"
