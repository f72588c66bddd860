"""SmolLM2 GGUF through transformers' GGUF loader (dequantised to fp32) on the installed torch; needs
the gguf and accelerate packages. usage: python -m bench.local_llm_transformers THREADS MODEL_PATH"""
import argparse, json, os, time
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("threads", type=int)
parser.add_argument("path")
args = parser.parse_args()
threads, path = args.threads, args.path
import torch
torch.set_num_threads(threads)
from transformers import AutoModelForCausalLM, AutoTokenizer
d, f = os.path.split(path)
t0 = time.perf_counter()
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
load_s = time.perf_counter() - t0
facts = "\n".join(f"Entity{i} | {rel} | Entity{(i * 7) % 53}" for i, rel in
                  zip(range(60), ["capital of", "located in", "born in", "member of"] * 15))
prompt = f"Knowledge:\n{facts}\nQuestion: List every fact about Entity12 through Entity20, one per line, then explain them."
system = "[0] You answer questions from the knowledge given. Be concise."
msgs = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
n_prompt = ids.shape[1]
with torch.inference_mode():
    t = time.perf_counter(); out = model(ids, use_cache=True); pre = time.perf_counter() - t
    past = out.past_key_values; nxt = out.logits[:, -1].argmax(-1, keepdim=True); gen = [nxt.item()]
    t = time.perf_counter()
    for _ in range(63):
        out = model(nxt, past_key_values=past, use_cache=True); past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True); gen.append(nxt.item())
        if gen[-1] == tok.eos_token_id: break
    g = time.perf_counter() - t
text = tok.decode(gen, skip_special_tokens=True)
# forced choice by scoring: mean? no - total log-likelihood of each choice's tokens after the prompt
choices = ['Paris', 'Saint-Étienne', 'The "Big" Apple', 'C:\\Temp', 'Rome']
cm = [{"role": "system", "content": "Reply with exactly one of: " + "; ".join(choices)},
      {"role": "user", "content": "Knowledge:\nFrance | capital | Paris\nQuestion: What is the capital of France?"}]
pids = tok.apply_chat_template(cm, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
t = time.perf_counter(); scores = {}
with torch.inference_mode():
    for c in choices:
        cids = tok(c + "<|im_end|>", add_special_tokens=False, return_tensors="pt")["input_ids"]
        full = torch.cat([pids, cids], 1)
        lp = model(full).logits[0, pids.shape[1] - 1:-1].log_softmax(-1)
        scores[c] = lp.gather(1, cids[0][:, None]).sum().item()
score_s = time.perf_counter() - t
best = max(scores, key=scores.get)
print(json.dumps(dict(kind="transformers-gguf", threads=threads, load_s=round(load_s, 2), n_prompt=n_prompt,
    prompt_tps=round(n_prompt / pre, 1), gen_tps=round((len(gen) - 1) / g, 1), n_gen=len(gen), text=text,
    choice=best, choice_score_s=round(score_s, 2), scores={k: round(v, 2) for k, v in scores.items()})))
