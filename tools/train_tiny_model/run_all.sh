#!/bin/sh
# Rebuild models/kvs-tiny and the kvs-tiny test fixtures from Debian packages.
# Needs: python3-torch libopenblas0-pthread python3-sentencepiece python3-numpy
#        bible-kjv bible-kjv-text r-cran-janeaustenr wamerican
set -eu
cd "$(dirname "$0")"
PY=/usr/bin/python3
MINUTES=${MINUTES:-55}
$PY build_corpus.py                      # data/*.txt, tests/fixtures/{heldout_long,calibration_text}.txt
$PY train_tokenizer.py                   # data/spm.model, models/kvs-tiny/tokenizer*.json, generation_config.json
$PY verify_tokenizer.py                  # independent tokenizer.json encoder == sentencepiece
nice -n 10 $PY train.py --minutes "$MINUTES"   # models/kvs-tiny/{config.json,model.safetensors}, work/train.log
# continuation focused on passkey rows (fresh optimizer), overwrites the export
mkdir -p work/cont && cp work/train_ids.npy work/cont/ && cp work/ckpt.pt work/ckpt_main.pt
nice -n 10 $PY train.py --init work/ckpt_main.pt --work work/cont --minutes "${CONT_MINUTES:-13}" \
    --lr 1.5e-3 --warmup 10 --phases "0.6:256:24:0.6,1.0:768:6:0.6" --skip-eval
nice -n 10 $PY evaluate.py               # work/eval.json (perplexity, passkey accuracy, samples)
nice -n 10 $PY passkey_partial.py         # graded passkey metrics -> work/eval.json
nice -n 10 $PY make_fixtures.py          # tests/fixtures/{kvs_tiny_golden,tokenizer_kvs_tiny,passkey_kvs_tiny}.json
$PY make_card.py                         # models/kvs-tiny/README.md
