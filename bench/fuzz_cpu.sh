#!/usr/bin/env bash
# Runs one libFuzzer target of build-fuzz until it has used CPU_SECONDS of CPU time (not wall
# time: the machine is shared), at nice 19, then interrupts it so it prints its final stats.
# Usage: bench/fuzz_cpu.sh NAME SEEDS_DIR[:SEEDS_DIR...] [CPU_SECONDS=1800]
#   NAME: jinja gguf output_parser tokenizer hf_pipeline http safetensors; SEEDS_DIR: its
#   committed corpus (hf_pipeline: tests/tokenizer/hf_pipeline_corpus and, as documents,
#   tests/tokenizer/golden/hf_components), paths relative to build-fuzz or absolute.
# Output: build-fuzz/fuzzing/NAME.log (the last lines hold executions, cov and ft).
# FUZZ_TIMEOUT (default 60 s) is libFuzzer's per-input limit, in wall time: a run that is paused
# (SIGSTOP, to keep a benchmark quiet) needs one longer than any pause, or the input in flight
# is reported as a timeout and the run ends. Replay any timeout-* artifact to check it.
set -euo pipefail
cd "$(dirname "$0")/../build-fuzz"
name=$1 seeds=$2 budget=${3:-1800} limit=${FUZZ_TIMEOUT:-60}
mkdir -p fuzzing/corpus-$name fuzzing/artifacts-$name
IFS=: read -r -a seed_dirs <<< "$seeds"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  nice -n 19 bin/${name}_fuzzer -timeout=$limit -print_final_stats=1 -artifact_prefix=fuzzing/artifacts-$name/ \
  fuzzing/corpus-$name "${seed_dirs[@]}" > fuzzing/$name.log 2>&1 &
pid=$!
tick=$(getconf CLK_TCK)
while kill -0 $pid 2>/dev/null; do
  sleep 10
  read -r -a st < /proc/$pid/stat 2>/dev/null || break
  cpu=$(( (st[13] + st[14]) / tick ))
  if [ "$cpu" -ge "$budget" ]; then kill -INT $pid; break; fi
done
wait $pid || true
echo "$name: $(grep -E '^#[0-9]+.*(DONE|INTERRUPTED|pulse|NEW|REDUCE)' fuzzing/$name.log | tail -1)"
grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' fuzzing/$name.log || true
