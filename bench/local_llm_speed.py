"""Load time, prompt and generation tokens/s of SmolLM2-135M Q4_1 on one llama.cpp binding.
usage: python -m bench.local_llm_speed {lcp|xll|sync} THREADS MODEL_PATH -> one JSON line
(lcp: llama-cpp-python, xll: xllamacpp, XLL_FA=0 for flash attention off, sync: llama-cpp-py-sync).
docs/BENCHMARKS.md, "Local LLM set-up: candidates"."""
import argparse, json, os, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("kind", choices=["lcp", "xll", "sync"])
parser.add_argument("threads", type=int)
parser.add_argument("path")
args = parser.parse_args()
kind, threads, path = args.kind, args.threads, args.path
facts = "\n".join(f"Entity{i} | {rel} | Entity{(i * 7) % 53}" for i, rel in
                  zip(range(60), ["capital of", "located in", "born in", "member of"] * 15))
prompt = f"Knowledge:\n{facts}\nQuestion: List every fact about Entity12 through Entity20, one per line, then explain them."
system = "You answer questions from the knowledge given. Be concise."
messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
choices = ['Paris', 'Saint-Étienne', 'The "Big" Apple', 'C:\\Temp', 'Rome']
gbnf = "root ::= " + " | ".join('"' + c.replace("\\", "\\\\").replace('"', '\\"') + '"' for c in choices)
cq = [{"role": "system", "content": "Reply with exactly one of: " + "; ".join(choices)},
      {"role": "user", "content": "Knowledge:\nFrance | capital | Paris\nQuestion: What is the capital of France?"}]
t0 = time.perf_counter()
if kind == "lcp":
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                          seed=0, verbose=False)
    ntok = lambda s: len(llm.tokenize(s.encode(), add_bos=False, special=True))
    grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
    extra = {}
elif kind == "xll":
    import xllamacpp as xlc
    p = xlc.CommonParams()
    p.model.path = path; p.n_ctx = 4096; p.n_parallel = 1; p.warmup = False
    p.cpuparams.n_threads = threads; p.cpuparams_batch.n_threads = threads
    p.sampling.temp = 0; p.sampling.top_k = 1; p.sampling.seed = 0
    p.verbosity = int(os.environ.get("XLL_VERBOSITY", "-1"))
    if os.environ.get("XLL_FA") == "0": p.flash_attn_type = xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    srv = xlc.Server(p)
    grammar = gbnf
    class _L:
        def create_chat_completion(self, messages, max_tokens, temperature, top_k, seed, stream, grammar=None):
            req = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                   "top_k": top_k, "seed": seed, "stream": True, "n_probs": 0}
            if grammar: req["grammar"] = grammar
            import queue, threading
            q = queue.Queue()
            def work():
                srv.handle_chat_completions(req, lambda c: q.put(c)); q.put(None)
            threading.Thread(target=work, daemon=True).start()
            while (c := q.get()) is not None:
                yield c
    llm = _L()
    ntok = None
    extra = {}
else:
    import llama_cpp_py_sync as llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                          seed=0, verbose=False)
    ntok = lambda s: len(llm.tokenize(s, add_special=False))
    grammar = gbnf
    extra = {"repeat_penalty": 1.0}
load_s = time.perf_counter() - t0

LAST = {}
def run(msgs, max_tokens, grammar=None):
    t = time.perf_counter(); first = None; parts = []; finish = None
    for ch in llm.create_chat_completion(messages=msgs, max_tokens=max_tokens, temperature=0.0,
                                         top_k=1, seed=0, stream=True, grammar=grammar, **extra):
        c = ch["choices"][0]; piece = c.get("delta", {}).get("content") or ""
        if piece and first is None:
            first = time.perf_counter() - t
        parts.append(piece); finish = c.get("finish_reason") or finish
        if "timings" in ch: LAST.update(ch["timings"])
    return "".join(parts), first, time.perf_counter() - t, finish

run(cq, 4)  # warm-up
# the chat prompt as the template renders it, counted with the model's own tokenizer
n_prompt = (lambda s: None if ntok is None else ntok(s))("<|im_start|>system\n[0] " + system + "<|im_end|>\n<|im_start|>user\n" + prompt +
                "<|im_end|>\n<|im_start|>assistant\n")
best = None
for rep in range(int(os.environ.get("REPS", "2"))):
    msgs = [{"role": "system", "content": f"[{rep}] " + system}, messages[1]]
    text, ttft, total, finish = run(msgs, 64)
    n_gen = ntok(text) if ntok else LAST["predicted_n"]
    if ntok is None: n_prompt = LAST["prompt_n"] + LAST["cache_n"]
    r = dict(prompt_tps=n_prompt / ttft, gen_tps=(n_gen - 1) / (total - ttft), ttft=ttft, total=total)
    best = r if best is None or r["total"] < best["total"] else best
ctext, *_ = run(cq, 16, grammar)
print(json.dumps(dict(kind=kind, threads=threads, load_s=round(load_s, 3), n_prompt=n_prompt,
                      n_gen=n_gen, **{k: round(v, 2) for k, v in best.items()}, finish=finish,
                      text=text, choice=ctext, choice_ok=ctext in choices)))
