"""A fault-injecting SGLang look-alike on loopback, for testing the HTTP client's retry and accounting.

Raw `asyncio.start_server` (not a framework) so a request can get a reset connection or a hang.
Minimal HTTP/1.1: request line and headers up to CRLFCRLF, a Content-Length body, and every
answer carries `Connection: close`. The server runs its own event loop in a background thread:

    with FaultServer() as srv:
        ...  # talk to srv.url; srv.hits["e500x2-0"] counts POST /generate requests for that rid

The behaviour of a `/generate` request is chosen by its `rid`: the part before the last '-'
(`"e500x2-0"` -> `e500x2`). A retry's rid carries an attempt suffix (`"e500x2-0~a2"`); the attempt
number `nth` is counted per base rid (suffix removed) over the server's life, and `rids[base]` lists
the rids each attempt really sent.

Like SGLang it refuses (400) a request whose rid is still in flight (a client that timed out and
retried with the same rid, while the server still works on the first attempt), checks the prompt
and `max_new_tokens` against the context length exactly as `tokenizer_manager._validate_one_request`
does, and reports the context length where SGLang does: `/v1/models` `max_model_len`, while
`/get_server_info` `context_length` (the server argument) is null.
"""
from __future__ import annotations
import asyncio, json, re, threading, time
from collections import Counter

OK_IDS = [5, 6, 7, 2]   # a success: three tokens and the EOS id 2
EOS = 2
HANG_S = 3.0            # how long `hang*` sleeps: longer than the client timeout in the tests
LONG_PROMPT_MSG = "The input (9 tokens) is longer than the model's context length"
BEHAVIOURS = ("ok", "e500x2", "e429x1", "e503always", "reset1", "hang1", "badjson", "abort",
              "leak", "leakbad", "leak2", "e400", "matchbad", "nan", "autotrunc", "eosatlen")
LEAK_N = 5              # SGLang 0.5.0-0.5.4 leaks the prompt's last min(5, len) ids into output_ids
NAN_MSG = "NaN happened"
TRUNCATED = b'{"text": "x", "output_ids": [1, 2'   # a 200 whose JSON body stops mid-array
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}

def base_rid(rid) -> str:
    "The rid without a retry's attempt suffix: `x-0~a3` -> `x-0`."
    return re.sub(r"~a\d+$", "", str(rid))

def behaviour_of(rid) -> str:
    "The behaviour name encoded in a rid: the part before its last '-'."
    rid = base_rid(rid)
    return rid.rsplit("-", 1)[0] if "-" in rid else rid

def _rids_of(req) -> list:
    "The rids a `/generate` body names (none when it names none)."
    rid = req.get("rid") if isinstance(req, dict) else None
    return [str(r) for r in (rid if isinstance(rid, list) else [rid]) if r is not None]

def sglang_error(code:int, message:str, typ:str="InternalServerError") -> dict:
    "SGLang's error shape for validation errors and 429/500/503."
    return {"object": "error", "message": message, "type": typ, "code": code}

class _Reset(Exception): "Close the connection without answering."
class _Hang(Exception): "Sleep past the client's timeout, then answer."

class FaultServer:
    "SGLang's native API on 127.0.0.1:<ephemeral port>, answering `/generate` by the behaviour in each rid."
    def __init__(self, context_length:int=4096, hang_s:float=HANG_S, version:str="0.5.3-fault"):
        self.context_length, self.hang_s, self.version = context_length, hang_s, version
        self.hits = Counter()       # POST /generate requests per base rid (a batch counts once per rid)
        self.rids = {}              # base rid -> the rids its attempts sent, in order
        self.inflight = set()       # rids of requests being answered right now (a hang included)
        self.duplicates = Counter() # requests refused because their rid was in flight
        self.paths = Counter()      # requests per "METHOD /path"
        self.requests = []          # (rid, attempt, behaviour, monotonic arrival time) in arrival order
        self.last_body = {}         # the last POST /generate body per base rid (a batch: the whole body under each rid)
        self.url = None
        self._lock = threading.Lock()
        self._thread = self._loop = self._stop = None
        self._ready = threading.Event()
        self._tasks = set()
        self._error = None

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault-server")
        self._thread.start()
        if not self._ready.wait(10): raise RuntimeError("fault server did not start in 10 s")
        if self._error: raise self._error
        return self

    def __exit__(self, *exc):
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        if self._thread.is_alive(): raise RuntimeError("fault server thread did not stop")

    def _run(self):
        try: asyncio.run(self._main())
        except BaseException as e:   # surface a start failure to __enter__
            self._error = e
            self._ready.set()

    async def _main(self):
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._on_conn, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        try: await self._stop.wait()
        finally:
            server.close()
            for t in list(self._tasks): t.cancel()   # hung handlers included
            if self._tasks: await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- HTTP --------------------------------------------------------------------------------
    async def _on_conn(self, reader, writer):
        task = asyncio.current_task()
        self._tasks.add(task)
        try: await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError): pass
        finally:
            self._tasks.discard(task)
            if not writer.transport.is_closing(): writer.transport.close()

    async def _serve(self, reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length") or 0)
        body = await reader.readexactly(n) if n else b""
        path = target.split("?", 1)[0]
        with self._lock: self.paths[f"{method} {path}"] += 1
        try: rids = _rids_of(json.loads(body)) if (method, path) == ("POST", "/generate") and body else []
        except ValueError: rids = []
        with self._lock:
            dup = next((r for r in rids if r in self.inflight), None)
            if dup is None: self.inflight.update(rids)
            else: self.duplicates[dup] += 1
        if dup is not None:   # SGLang's tokenizer manager refuses a rid it is still serving
            status, payload = 400, {"error": {"message": f"Duplicate request ID {dup!r}: a request with this "
                                                         "rid is still running"}}
        else:
            try:
                try: status, payload = self._route(method, path, body)
                except _Reset:
                    writer.transport.abort()
                    return                                     # no status line, no bytes: the socket just goes
                except _Hang as h:
                    await self._hang()                        # the client gives up first and closes its end
                    status, payload = h.args
            finally:
                with self._lock: self.inflight.difference_update(rids)
        if writer.transport.is_closing(): return
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     "Connection: close\r\n\r\n".encode("latin-1") + data)
        await writer.drain()
        writer.close()

    async def _hang(self):
        "How a hung answer waits: `hang_s` seconds (a subclass may wait for an event instead)."
        await asyncio.sleep(self.hang_s)

    def _route(self, method, path, body):
        if method == "GET" and path in ("/health", "/health_generate"): return 200, {}
        if method == "GET" and path == "/get_server_info":
            # context_length is the --context-length argument: usually unset
            return 200, {"version": self.version, "context_length": None,
                         "skip_tokenizer_init": False, "dp_size": 1, "tp_size": 1}
        # SGLang's OpenAI-compatible model list carries the real context length
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fault/model", "object": "model", "created": 0,
                                                     "owned_by": "sglang",
                                                     "root": "fault/model", "max_model_len": self.context_length}]}
        if method == "GET" and path == "/get_model_info":
            return 200, {"model_path": "fault/model", "tokenizer_path": "fault/model", "is_generation": True}
        if method == "POST" and path == "/generate": return self._generate(json.loads(body or b"{}"))
        return 404, {"detail": "Not Found"}

    # --- /generate -----------------------------------------------------------------------------
    def _generate(self, req:dict):
        ids, rid = req.get("input_ids"), req.get("rid")
        with self._lock:
            for r in (rid if isinstance(rid, list) else [rid]):
                self.last_body[base_rid(r) if r is not None else None] = req
        if ids and isinstance(ids[0], list):   # a batch: body-level behaviours per item, the first HTTP-level one wins
            rids = rid if isinstance(rid, list) else [f"ok-{i}" for i in range(len(ids))]
            sps = req.get("sampling_params")
            sps = sps if isinstance(sps, list) else [sps] * len(ids)
            plans = [self._plan(r, p, s) for r, p, s in zip(rids, ids, sps)]
            http = next((pl for pl in plans if isinstance(pl, Exception) or pl[0] != 200 or isinstance(pl[1], bytes)),
                        None)
            if http is not None:
                if isinstance(http, Exception): raise http
                return http
            return 200, [pl[1] for pl in plans]
        plan = self._plan(rid if rid is not None else "ok-0", ids or [], req.get("sampling_params"))
        if isinstance(plan, Exception): raise plan
        return plan

    def _plan(self, rid, prompt_ids, sp=None):
        "(status, payload) or an exception (`_Reset`, `_Hang`) for one request of `rid`."
        b, base = behaviour_of(rid), base_rid(rid)
        with self._lock:
            self.hits[base] += 1
            nth = self.hits[base]
            self.rids.setdefault(base, []).append(str(rid))
            self.requests.append((base, nth, b, time.monotonic()))
        ctx, n_in = self.context_length, len(prompt_ids)
        mnt = (sp or {}).get("max_new_tokens")
        if n_in >= ctx:   # tokenizer_manager._validate_one_request, message verbatim
            return 400, {"error": {"message": f"The input ({n_in} tokens) is longer than the model's context "
                                              f"length ({ctx} tokens)."}}
        if mnt is not None and mnt + n_in >= ctx:
            return 400, {"error": {"message": f"Requested token count exceeds the model's maximum context "
                                              f"length of {ctx} tokens. You requested a total of {mnt + n_in} "
                                              f"tokens: {n_in} tokens from the input messages and {mnt} tokens "
                                              "for the completion. Please reduce the number of tokens in the "
                                              "input messages or the completion to fit within the limit."}}
        ok = self._answer(rid, prompt_ids, OK_IDS, {"type": "stop", "matched": EOS})
        if b == "ok": return 200, ok
        if b == "e500x2": return (500, sglang_error(500, "injected internal error")) if nth <= 2 else (200, ok)
        if b == "e429x1":
            return (429, sglang_error(429, "too many requests", "RateLimitError")) if nth <= 1 else (200, ok)
        if b == "e503always": return 503, sglang_error(503, "server is overloaded", "ServiceUnavailableError")
        if b == "reset1": return _Reset() if nth <= 1 else (200, ok)
        if b == "hang1": return _Hang(200, ok) if nth <= 1 else (200, ok)
        if b == "badjson": return 200, TRUNCATED
        if b == "abort":
            return 200, self._answer(rid, prompt_ids, [], {"type": "abort", "message": "out of memory"},
                                     completion_tokens=0)
        if b == "leak":   # SGLang 0.5.0-0.5.4: output_ids start with the prompt's last min(5, len) ids, not counted
            tail = list(prompt_ids[-min(LEAK_N, len(prompt_ids)):])
            return 200, self._answer(rid, prompt_ids, tail + OK_IDS, {"type": "stop", "matched": EOS},
                                     completion_tokens=len(OK_IDS))
        if b == "leakbad":   # five extra ids that are not the prompt's tail
            extra = [t + 1000 for t in prompt_ids[-LEAK_N:]] or [1000] * LEAK_N
            return 200, self._answer(rid, prompt_ids, extra + OK_IDS, {"type": "stop", "matched": EOS},
                                     completion_tokens=len(OK_IDS))
        if b == "leak2":   # two extra ids equal to the prompt's tail: not the 0.5.0-0.5.4 mechanism (that leaks 5)
            return 200, self._answer(rid, prompt_ids, list(prompt_ids[-2:]) + OK_IDS, {"type": "stop", "matched": EOS},
                                     completion_tokens=len(OK_IDS))
        if b == "nan":   # schedule_batch.py: a sampled id outside the vocabulary is overwritten with an EOS id
            return 200, self._answer(rid, prompt_ids, OK_IDS, {"type": "stop", "matched": NAN_MSG})
        if b == "autotrunc":   # --allow-auto-truncate: the prompt's tail was cut, prompt_tokens counts what was kept
            return 200, self._answer(rid, prompt_ids, OK_IDS, {"type": "stop", "matched": EOS},
                                     prompt_tokens=max(1, n_in - 3))
        if b == "eosatlen":   # check_finished tests the length limit before EOS: the end id as the last allowed token
            return 200, self._answer(rid, prompt_ids, OK_IDS, {"type": "length", "length": len(OK_IDS)})
        if b == "e400": return 400, {"error": {"message": LONG_PROMPT_MSG}}
        if b == "matchbad": return 200, self._answer(rid, prompt_ids, [5, 6, 7], {"type": "stop", "matched": EOS})
        return 400, {"error": {"message": f"fault server: unknown behaviour {b!r} in rid {rid!r}"}}

    @staticmethod
    def _answer(rid, prompt_ids, output_ids, finish, completion_tokens=None, prompt_tokens=None) -> dict:
        return {"text": "x" * len(output_ids), "output_ids": list(output_ids),
                "meta_info": {"id": rid, "finish_reason": finish,
                              "prompt_tokens": len(prompt_ids) if prompt_tokens is None else prompt_tokens,
                              "completion_tokens": len(output_ids) if completion_tokens is None else completion_tokens,
                              "cached_tokens": 0, "e2e_latency": 0.001}}
