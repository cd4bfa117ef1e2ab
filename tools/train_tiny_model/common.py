"""Shared paths and small helpers for the kvs-tiny training tools."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DATA = os.path.join(HERE, "data")          # regenerated, git-ignored
WORK = os.path.join(HERE, "work")          # checkpoints / logs, git-ignored
MODEL_DIR = os.path.join(REPO, "models", "kvs-tiny")
FIXTURES = os.path.join(REPO, "tests", "fixtures")

SPECIAL_USER = ["<|im_start|>", "<|im_end|>"]


def ensure(d):
    os.makedirs(d, exist_ok=True)
    return d


def read(p):
    with open(p, encoding="utf-8") as f:
        return f.read()


def write(p, s):
    ensure(os.path.dirname(os.path.abspath(p)))
    with open(p, "w", encoding="utf-8") as f:
        f.write(s)
