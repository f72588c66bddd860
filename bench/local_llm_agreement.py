"""Forced-choice and free-text agreement between bindings: same prompts, greedy, one thread.
usage: python -m bench.local_llm_agreement {lcp|xll|xll-fa0} > replies.json (docs/BENCHMARKS.md,
"Local LLM set-up: candidates"); xll is xllamacpp with llama.cpp's automatic flash attention."""
import argparse, json, os, random
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("kind", choices=["lcp", "xll", "xll-fa0"])
kind = parser.parse_args().kind
rng = random.Random(7)
cities = ["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Oslo", "Prague", "Dublin", "Athens",
          "Warsaw", "Budapest", "Helsinki", "Brussels", "Sofia", "Zagreb"]
people = ["Ada Lovelace", "Alan Turing", "Marie Curie", "Niels Bohr", "Emmy Noether", "Kurt Gödel",
          "Grace Hopper", "John von Neumann", "Lise Meitner", "Paul Dirac"]
rels = ["born in", "died in", "lived in", "studied in", "worked in"]
cases = []
for i in range(40):
    facts = [(rng.choice(people), rng.choice(rels), rng.choice(cities)) for _ in range(rng.randint(3, 12))]
    h, r, t = rng.choice(facts)
    choices = list(dict.fromkeys([t] + rng.sample(cities, 4)))
    rng.shuffle(choices)
    know = "\n".join(" | ".join(f) for f in facts)
    cases.append(dict(system="Reply with exactly one of: " + "; ".join(choices),
                      prompt=f"Knowledge:\n{know}\nQuestion: Where was {h} {r.split()[0]}?", choices=choices, gold=t))
os.environ["LOKG_LOCAL_ENGINE"] = "llama_cpp" if kind == "lcp" else "xllamacpp"
from lokg.runtime.llm import local
from lokg.runtime.llm.local import LocalLlama
if kind == "xll":
    local._XLlamaCpp.flash_attn = None  # llama.cpp's automatic choice
m = LocalLlama(threads=1)
out = []
for c in cases:
    a = m.complete(c["prompt"], system=c["system"], max_tokens=16, choices=c["choices"]).text
    f = m.complete(c["prompt"], system="Answer briefly from the knowledge.", max_tokens=24).text
    out.append(dict(choice=a, ok=a in c["choices"], gold=c["gold"], free=f))
print(json.dumps(out))
