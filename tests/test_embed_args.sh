#!/bin/sh
# examples/embed: a bad option exits 2 with a message naming it, before loading anything (it
# is given a model folder that does not exist, so an option it wrongly accepted would end in
# "cannot load the model", status 1); --help exits 0; a missing model, a corrupt checkpoint,
# a missing input file and invalid UTF-8 exit 1 with a message, never a crash. With the model
# installed ($KILN_MINILM_DIR), sentences and --file/--out run to the end.
# Usage: test_embed_args.sh PATH-TO-embed
set -u
exe=$1
tmp=$(mktemp -d)
out=$tmp/stdout err=$tmp/stderr
trap 'rm -rf "$tmp"' EXIT
failed=0
nomodel=/nonexistent/minilm

# run STATUS NEEDLE ARGS...: exits with STATUS and stderr (or stdout for status 0) has NEEDLE
run() {
    want=$1 needle=$2
    shift 2
    "$exe" "$@" >"$out" 2>"$err"
    got=$?
    where=$err
    [ "$want" = 0 ] && where=$out
    if [ "$got" != "$want" ]; then
        echo "FAIL $*: exit status $got, not $want"; cat "$err"; failed=1
    elif ! grep -qF -- "$needle" "$where"; then
        echo "FAIL $*: the output does not say '$needle':"; cat "$where"; failed=1
    elif [ "$want" != 0 ] && [ -s "$out" ]; then
        echo "FAIL $*: failed, but printed to stdout:"; cat "$out"; failed=1
    else
        echo "ok   $* -> $got: $(head -n 1 "$where")"
    fi
}

bad() {
    opt=$1 value=$2
    run 2 "$opt: '$value'" --model "$nomodel" "$opt" "$value" sentence
}
for v in abc 5x "" -3 0 65537 99999999999999999999 2.5; do bad --batch "$v"; done
for v in abc 0 -1 1025 1e3; do bad --threads "$v"; done
run 2 "--frobnicate" --model "$nomodel" --frobnicate x
run 2 "'--batch' requires an argument" --model "$nomodel" x --batch
run 2 "invalid option" --model "$nomodel" -x y
run 2 "no sentences" --model "$nomodel"
run 2 "--file needs --out" --model "$nomodel" --file "$tmp/in.txt"
run 2 "--out needs --file" --model "$nomodel" --out "$tmp/o.safetensors" x
run 2 "unexpected argument 'x' with --file" --model "$nomodel" --file "$tmp/in.txt" --out "$tmp/o.safetensors" x
run 2 "--q4_0: give one of --int8, --q8_0, --q4_0" --model "$nomodel" --q8_0 --q4_0 x

"$exe" --help >"$out" 2>"$err"
got=$?
if [ $got != 0 ]; then echo "FAIL --help: exit status $got"; failed=1; fi
for opt in --model --file --out --batch --threads --profile --help; do
    grep -qF -- "$opt" "$out" || { echo "FAIL --help does not list $opt"; failed=1; }
done
[ $got = 0 ] && echo "ok   --help -> 0, lists every option"
run 0 "usage:" -h

# good options go on to load the model: a missing one is status 1 with a message
run 1 "cannot load the model from $nomodel" --model "$nomodel" --batch 8 --threads 1 --profile "$tmp/p.json" x y
run 1 "cannot load the model from $nomodel" --model="$nomodel" --file "$tmp/in.txt" --out="$tmp/o.safetensors"
KILN_MINILM_DIR=$nomodel run 1 "cannot load the model from $nomodel" x

dir=${KILN_MINILM_DIR:-}
if [ -z "$dir" ] || [ ! -f "$dir/model.safetensors" ]; then
    echo "skip the runs with the model: KILN_MINILM_DIR='$dir' has no model.safetensors"
    exit $failed
fi
# a corrupt checkpoint beside the real config and vocabulary
mkdir "$tmp/corrupt"
cp "$dir/config.json" "$dir/vocab.txt" "$tmp/corrupt/"
head -c 100000 "$dir/model.safetensors" >"$tmp/corrupt/model.safetensors"
run 1 "kiln_bert_load" --model "$tmp/corrupt" x
printf '{"hidden_size": 384,' >"$tmp/corrupt/config.json"
run 1 "config.json: not a JSON object" --model "$tmp/corrupt" x

run 0 "cosine similarity" --model "$dir" "A man is eating food." "A man is eating a piece of bread." ""
KILN_MINILM_DIR=$dir run 0 "cosine similarity" --threads 1 "one sentence"
run 0 "cosine similarity" --model "$dir" --q8_0 "A man is eating food." "A man is eating a piece of bread."
run 0 "cosine similarity" --model "$dir" --q4_0 --q4_0 "A man is eating food." "A man is eating a piece of bread."
run 1 "cannot open $tmp/missing.txt" --model "$dir" --file "$tmp/missing.txt" --out "$tmp/o.safetensors"
printf 'fine\nnot \377 UTF-8\n' >"$tmp/bad.txt"
run 1 "line 2: " --model "$dir" --file "$tmp/bad.txt" --out "$tmp/o.safetensors"
printf 'A man is eating food.\n\nThe girl is carrying a baby.\r\nno newline' >"$tmp/in.txt"
run 0 "wrote 4 embeddings of 384 values" --model "$dir" --file "$tmp/in.txt" --out "$tmp/o.safetensors" --batch 3
# 8-byte header length, the header, then 4 x 384 floats
size=$(wc -c <"$tmp/o.safetensors")
head=$(od -An -tu8 -N8 "$tmp/o.safetensors" | tr -d ' ')
if [ "$size" != $((8 + head + 4 * 384 * 4)) ] || ! head -c $((8 + head)) "$tmp/o.safetensors" | grep -q '"embeddings":{"dtype":"F32","shape":\[4,384\]'; then
    echo "FAIL --out: $size bytes, header: $(head -c $((8 + head)) "$tmp/o.safetensors" | tail -c +9)"; failed=1
else
    echo "ok   --out: one f32 tensor 'embeddings' [4, 384]"
fi
exit $failed
