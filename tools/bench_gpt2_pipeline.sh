#!/usr/bin/env bash
# The reference pipeline of experiments/models/gpt2_openwebtext.yaml, timed (docs/BENCHMARKS.md):
#   1. 1 GB of text made from what a Debian machine has (its documentation: changelogs, copyright
#      files, READMEs; Python's and Perl's library sources and C headers; then tiny Shakespeare
#      repeated up to 1,000,000,000 bytes);
#   2. `ablate data prepare` with GPT-2's tokenizer into llm.c shards: time, MB/s, peak memory;
#   3. GPT-2 small (124M parameters, context 1,024) trained from those shards for STEPS steps of
#      BATCH x 1,024 tokens, against PyTorch at the same shape (../shared/bench/torch_ref.py:
#      pre-norm, learned positions, GELU, biases, tied head, AdamW, random tokens) with as many
#      threads: tokens/s and peak memory (max RSS) of each.
#   tools/bench_gpt2_pipeline.sh [BUILD_DIR] [STEPS] [BATCH] [PRECISION]
#   (default ./build, 4 steps, batch 1, float32; bf16: ablate's train.precision, PyTorch's autocast)
# Needs GPT-2's encoder.json and vocab.bpe in the data path (docs/DATA.md) and python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-4}
batch=${3:-1}
precision=${4:-float32}
case $precision in
  float32) autocast=() ;;
  bf16) autocast=(--autocast bf16) ;;
  *) echo "bench_gpt2_pipeline: precision '$precision' is not float32 or bf16" >&2; exit 2 ;;
esac
ablate=$build/ablate
work=$build/bench-gpt2-pipeline
threads=$(nproc)
mkdir -p "$work"
shakespeare=""
for d in "$root/data" "$root/../shared/data" "$HOME/.cache/ablate/data"; do
  [ -f "$d/tinyshakespeare.txt" ] && { shakespeare=$d/tinyshakespeare.txt; break; }
done
[ -n "$shakespeare" ] || { echo "bench_gpt2_pipeline: tinyshakespeare.txt not found" >&2; exit 1; }
torch_ref=$root/../shared/bench/torch_ref.py
[ -f "$torch_ref" ] || { echo "bench_gpt2_pipeline: $torch_ref not found (PyTorch reference)" >&2; exit 1; }
peak() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.2f GB", $1 / 1048576}'; }

echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
corpus=$work/corpus.txt
if [ ! -f "$corpus" ] || [ "$(stat -L -c %s "$corpus")" != 1000000000 ]; then
  echo "== making 1 GB of text"
  set +e +o pipefail  # find meets unreadable files; the endless cat stops at head's 1 GB
  { find /usr/share/doc /usr/share/common-licenses -type f -name '*.gz' -exec zcat {} \;
    find /usr/share/doc /usr/share/common-licenses -type f ! -name '*.gz' -size -2M -exec grep -Il . {} \; | xargs cat
    find /usr/lib/python3 /usr/share/perl /usr/include -type f \( -name '*.py' -o -name '*.pm' -o -name '*.h' -o -name '*.hpp' \) \
      -size -2M -print0 | xargs -0 cat
    while cat "$shakespeare"; do :; done
  } 2>/dev/null | head -c 1000000000 > "$corpus"
  set -e -o pipefail
fi

echo "== ablate data prepare: 1 GB, gpt2, $threads threads"
/usr/bin/time -v "$ablate" data prepare "$corpus" --out "$work/shards" --tokenizer gpt2 --split '\n\n' \
  --threads "$threads" --overwrite -q 2> "$work/prepare.time" | tail -1
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/prepare.time" | awk -F: '{s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s}')
cpu=$(awk '/User time|System time/ {s += $NF} END {print s}' "$work/prepare.time")
echo "prepare: wall ${wall} s ($(awk -v w="$wall" 'BEGIN {printf "%.1f", 1000 / w}') MB/s), CPU ${cpu} s ($(awk -v c="$cpu" 'BEGIN {printf "%.1f", 1000 / c}') MB per CPU-second), peak $(peak "$work/prepare.time")"

echo "== GPT-2 small from the shards: $steps steps of $batch x 1024 tokens, $threads threads, $precision"
/usr/bin/time -v "$ablate" run "$root/experiments/models/gpt2_openwebtext.yaml" -o "$work/run" --overwrite -q \
  data.shards="$work/shards" train.steps="$steps" train.batch_size="$batch" train.grad_accum=1 \
  train.eval_every=100000 train.eval_at_start=false train.eval_batches=1 eval=[] \
  train.checkpoint_every=100000 sample.tokens=0 train.precision="$precision" --threads "$threads" 2> "$work/train.time" >/dev/null || {
  tail -20 "$work/train.time" >&2; exit 1; }
"$ablate" export "$work/run" --csv -o "$work/run.csv" > /dev/null
echo "ablate: $(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "train/tokens_per_s") c = i}
  NR > 1 {t = $c} END {printf "%.1f", t}' "$work/run.csv") tokens/s (the last logged step), peak $(peak "$work/train.time")"

echo "== PyTorch, the same shape${autocast:+, autocast bf16}"
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
export BENCH_BLAS="openblas-${OPENBLAS_CORETYPE:-auto}"
/usr/bin/time -v /usr/bin/python3 "$torch_ref" --name gpt2-small --vocab 50257 --d_model 768 --n_heads 12 \
  --n_layers 12 --ctx 1024 --batch "$batch" --ffn gelu --norm pre --pos learned --bias 1 --tie 1 \
  --steps "$steps" --warmup_steps 1 --no_gen --threads "$threads" "${autocast[@]+"${autocast[@]}"}" 2> "$work/torch.time"
echo "PyTorch peak $(peak "$work/torch.time")"
