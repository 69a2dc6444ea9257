"""A scripted SGLang `/generate` on loopback: each rid answered with the output ids recorded for it.

Built on `FaultServer` (the real server's wire format: request and response shapes, context checks, duplicate rids
refused while in flight). `hold` keeps one rid's answer back until `release()`: a test sees that request arrive
(`arrived(rid)`) and knows every request before it was answered, so it can kill the client at that point.
"""
from __future__ import annotations
import asyncio, threading, time
from fault_server import FaultServer, _Hang, base_rid

class ScriptedServer(FaultServer):
    "SGLang's native API answering `/generate` from `outputs` (base rid -> output ids, a turn as the model emits it)."
    def __init__(self, outputs:dict, hold:str|None=None, **kw):
        super().__init__(**kw)
        self.outputs, self.hold, self._released = dict(outputs), hold, threading.Event()
        self.prompts = {}    # base rid -> the prompt ids its last request sent

    def _plan(self, rid, prompt_ids, sp=None):
        base = base_rid(rid)
        with self._lock:
            self.hits[base] += 1
            self.requests.append((base, self.hits[base], "scripted", time.monotonic()))
            self.prompts[base] = list(prompt_ids)
        out = self.outputs.get(base)
        if out is None: return 400, {"error": {"message": f"scripted server: no output recorded for rid {rid!r}"}}
        mnt = (sp or {}).get("max_new_tokens")
        if mnt is not None and len(prompt_ids) + mnt >= self.context_length:
            return 400, {"error": {"message": f"Requested token count exceeds the model's maximum context length of "
                                              f"{self.context_length} tokens."}}
        if mnt is not None and len(out) > mnt:   # the budget ends the turn first, as SGLang reports it
            return 200, self._answer(rid, prompt_ids, out[:mnt], {"type": "length", "length": mnt})
        answer = self._answer(rid, prompt_ids, out, {"type": "stop", "matched": out[-1]})
        if base == self.hold and not self._released.is_set(): return _Hang(200, answer)
        return 200, answer

    async def _hang(self):
        while not self._released.is_set(): await asyncio.sleep(0.01)

    def arrived(self, rid:str) -> bool: return self.hits[rid] > 0
    def release(self): self._released.set()
    def idle(self) -> bool:
        with self._lock: return not self.inflight
