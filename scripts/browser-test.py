#!/usr/bin/env python3
"""Browser test of toy serve's page (issue 5): headless Chromium driven through the Chrome
DevTools Protocol (https://chromedevtools.github.io/devtools-protocol/) over a websocket.

Starts the server (by default `target/release/toy serve -m MODEL --port P --runs-dir DIR`) with a
fake runs dir holding one training run's events.jsonl, opens the page and checks that:
  - the page loads, lists the model, and throws no JavaScript exception;
  - a chat message typed into #chat-input and sent gets an assistant answer that streams in
    (text appears and grows over several chunks) and ends with usage info;
  - a second message sends the whole conversation (history) and the stop button aborts a stream;
  - a ViT run's accuracy evaluations draw an accuracy curve beside its loss;
  - the runs view lists the fake run, its canvas draws every step/eval point (data-points and
    pixels of the train-loss colour), and points appended to events.jsonl appear by polling;
  - the server's own telemetry run shows the requests made above;
  - a page on another origin (a second port) calls `toy serve --api-key` with streaming: the
    preflight passes, a request without the key is a 401 it can read, the keyed one streams.
Prints `browser: N passed, M failed`; exits 1 on any failure, 2 when something it needs is missing.

Run through scripts/browser-test.sh, which makes the venv (websocket-client) and installs chromium.
"""
import argparse
import base64
import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websocket  # websocket-client

RUN_ID = "fake-train-run"

# A front end on another origin: first a request without the key (a 401 the page can read),
# then a streamed chat with it, read chunk by chunk; the result lands in window.result.
FRONT_END_PAGE = """<!doctype html><title>front end</title><script>
(async () => {
  try {
    const body = JSON.stringify({messages: [{role: "user", content: "Say hello."}], max_tokens: 24,
                                 temperature: 0, stream: true});
    const headers = {"Content-Type": "application/json"};
    const bare = await fetch("API/v1/chat/completions", {method: "POST", headers, body});
    const r = await fetch("API/v1/chat/completions", {method: "POST", body,
      headers: Object.assign({Authorization: "Bearer KEY"}, headers)});
    const reader = r.body.getReader(), dec = new TextDecoder();
    let text = "", chunks = 0, buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\\n\\n")) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
        const c = JSON.parse(ev.slice(6));
        if (c.choices.length && c.choices[0].delta.content) { text += c.choices[0].delta.content; chunks++; }
      }
    }
    window.result = {unauthorized: bare.status, status: r.status, text, chunks};
  } catch (e) { window.result = {error: String(e)}; }
})();
</script>"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what, interval=0.05):
    """Poll pred() until it returns a truthy value; raise with `what` after `timeout` s."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def write_events(path, steps, evals, start=1, resume=False):
    """Append `steps` step lines from step `start` and an eval line every steps/evals steps; a
    run_start first when the run starts (start 1) or resumes from the checkpoint at start - 1."""
    lines = []
    if start == 1 or resume:
        lines.append({"type": "run_start", "time": time.time(), "config": {"model": "fake", "lr": 1e-3},
                      "start_step": start - 1})
    every = max(1, steps // max(1, evals))
    for s in range(start, start + steps):
        loss = 4.0 * (0.97 ** s) + 1.0
        lines.append({"type": "step", "step": s, "loss": loss, "lr": 1e-3, "grad_norm": 1.0, "tok_s": 1000.0,
                      "time": time.time()})
        if (s - start + 1) % every == 0:
            lines.append({"type": "eval", "step": s, "val_loss": loss + 0.1, "sample": f"sample at step {s}"})
    with open(path, "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


class Browser:
    """One headless Chromium and a CDP session on its single page."""

    def __init__(self, chromium, profile):
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             "--remote-allow-origins=*", f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        text = wait_for(lambda: os.path.exists(port_file) and Path(port_file).read_text().strip(), 30,
                        "chromium's DevTools port")
        port = int(text.split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.next_id = 0
        self.events = []  # every CDP event seen, as (method, params)
        self.exceptions = []  # uncaught page exceptions (kept when events is cleared)

    def cmd(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"CDP {method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append((msg["method"], msg.get("params", {})))
                if msg["method"] == "Runtime.exceptionThrown":
                    self.exceptions.append(msg["params"]["exceptionDetails"])

    def js(self, expr):
        """Evaluate `expr` in the page; returns its JSON value (promises are awaited)."""
        r = self.cmd("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page JS failed: {expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, selector):
        """A real mouse click at the centre of the element (as a user would)."""
        box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                      f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.cmd("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type_into(self, selector, text):
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); e.select && e.select(); }})()")
        self.cmd("Input.insertText", text=text)

    def set_value(self, selector, value):
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.value = {json.dumps(value)};"
                f" e.dispatchEvent(new Event('change')); }})()")

    def pump(self):
        """Collect pending events (a cheap command round-trip)."""
        self.cmd("Runtime.evaluate", expression="0")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.on_fail = None  # called with a file name after a failure (a screenshot)

    def run(self, name, fn):
        t0 = time.time()
        try:
            fn()
            self.passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            if self.on_fail:
                self.on_fail(f"fail-{self.failed}.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toy", default="target/release/toy")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--server", help="server command instead of toy serve; {port} and {runs} are filled in")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--screenshots", default="target/browser-test",
                    help="where to save screenshots (also one per failed check)")
    args = ap.parse_args()
    if not args.chromium:
        print("browser: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.server:
        for need in (args.toy, args.model):
            if not os.path.exists(need):
                print(f"browser: {need} is missing", file=sys.stderr)
                return 2

    tmp = tempfile.mkdtemp(prefix="toy-browser-test-")
    runs_dir = os.path.join(tmp, "runs")
    os.makedirs(os.path.join(runs_dir, RUN_ID))
    events = os.path.join(runs_dir, RUN_ID, "events.jsonl")
    write_events(events, steps=40, evals=4)
    n_points = 40 + 4
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if args.server:
        cmd = args.server.format(port=port, runs=runs_dir)
        server = subprocess.Popen(cmd, shell=True, stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    else:
        server = subprocess.Popen([args.toy, "serve", "-m", args.model, "--port", str(port), "--runs-dir", runs_dir],
                                  stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    browser = None
    checks = Checks()
    try:
        def up():
            if server.poll() is not None:
                raise RuntimeError(f"server exited with {server.returncode}")
            try:
                return urllib.request.urlopen(base + "/health", timeout=2).status == 200
            except OSError:
                return False
        wait_for(up, 120, "the server's /health", interval=0.2)
        browser = Browser(args.chromium, os.path.join(tmp, "profile"))
        b = browser
        for domain in ("Page", "Runtime", "Network"):
            b.cmd(domain + ".enable")
        os.makedirs(args.screenshots, exist_ok=True)
        for old in Path(args.screenshots).glob("fail-*.png"):
            old.unlink()

        def screenshot(name):
            png = base64.b64decode(b.cmd("Page.captureScreenshot", format="png")["data"])
            with open(os.path.join(args.screenshots, name), "wb") as f:
                f.write(png)

        def page_loads():
            b.cmd("Page.navigate", url=base + "/")
            wait_for(lambda: b.js("document.readyState") == "complete", 20, "the page to load")
            assert b.js("document.title") == "toy serve", b.js("document.title")
            for sel in ("#chat-input", "#send", "#stop", "#model", "#runs-list", "canvas#loss-chart"):
                assert b.js(f"!!document.querySelector({json.dumps(sel)})"), f"{sel} missing"
            models = wait_for(lambda: b.js("[...document.querySelectorAll('#model option')].map(o => o.value)"),
                              10, "the model picker to fill from /v1/models")
            assert all(models), models
        def screenshot_quietly(name):
            try:
                screenshot(name)
                print(f"     screenshot: {os.path.join(args.screenshots, name)}")
            except Exception as e:  # noqa: BLE001 - a failed screenshot must not hide the failure
                print(f"     (no screenshot: {e})")
        checks.on_fail = screenshot_quietly

        checks.run("page loads and the model picker fills from /v1/models", page_loads)

        answers = []

        def chat_streams():
            b.set_value("#temperature", "0")
            b.set_value("#max-tokens", "48")
            b.type_into("#chat-input", "Write a short poem about the sea.")
            b.click("#send")
            sizes = []

            def finished():
                st = b.js("(() => { const m = [...document.querySelectorAll('.msg.assistant')].at(-1);"
                          " return m ? [m.dataset.state, m.querySelector('.text').textContent.length] : null; })()")
                if st:
                    sizes.append(st)
                return st and st[0] != "streaming"
            wait_for(finished, 120, "the answer to finish", interval=0.03)
            state, text, chunks, info = b.js(
                "(() => { const m = [...document.querySelectorAll('.msg.assistant')].at(-1);"
                " return [m.dataset.state, m.querySelector('.text').textContent, +m.dataset.chunks,"
                " (m.querySelector('.info') || {}).textContent]; })()")
            assert state == "done", f"state {state}: {text}"
            assert text.strip(), "empty answer"
            streaming_sizes = sorted({n for s, n in sizes if s == "streaming" and n > 0})
            assert len(streaming_sizes) >= 2 and streaming_sizes[0] < len(text), \
                f"text did not grow while streaming: sizes seen {streaming_sizes}, final {len(text)}"
            assert chunks >= 2, f"{chunks} chunks"
            assert "completion tokens" in (info or ""), f"no usage in the info line: {info!r}"
            answers.append(text)
            print(f"     answer ({chunks} chunks, {len(streaming_sizes)} partial sizes seen): {text[:80]!r}")
            screenshot("chat.png")
        checks.run("a chat message gets a streamed answer", chat_streams)

        def history_and_stop():
            b.events.clear()
            b.set_value("#max-tokens", "400")
            # one of the page's other samplers, filled in; the empty ones are not sent
            b.set_value("#more-sampling [data-field='top_k']", "20")
            b.set_value("#more-sampling [data-field='samplers']", "kt")
            b.type_into("#chat-input", "Now count from 1 to 200, separated by commas.")
            b.click("#send")
            wait_for(lambda: b.js("[...document.querySelectorAll('.msg.assistant')].at(-1).dataset.chunks > 0"),
                     60, "the first chunk")
            b.click("#stop")
            state = wait_for(lambda: b.js("(() => { const s = [...document.querySelectorAll('.msg.assistant')]"
                                          ".at(-1).dataset.state; return s === 'streaming' ? null : s; })()"),
                             10, "the stream to stop")
            assert state == "stopped", f"state after stop: {state}"
            assert b.js("document.querySelector('#send').disabled") is False, "send still disabled after stop"
            b.pump()
            posts = [p["request"] for m, p in b.events if m == "Network.requestWillBeSent"
                     and p["request"]["url"].endswith("/v1/chat/completions")]
            assert len(posts) == 1, f"{len(posts)} chat requests"
            body = json.loads(posts[0]["postData"])
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["user", "assistant", "user"], f"history not sent: roles {roles}"
            assert body["messages"][1]["content"] == answers[0], "first answer not in the history"
            assert body["stream"] is True and body["stream_options"] == {"include_usage": True}, body
            assert body["temperature"] == 0 and body["max_tokens"] == 400, body
            assert body["top_k"] == 20 and body["samplers"] == "kt" and "min_p" not in body, body
            b.set_value("#more-sampling [data-field='top_k']", "")
            b.set_value("#more-sampling [data-field='samplers']", "")
        checks.run("the history and the page's sampler settings are sent; stop aborts the stream", history_and_stop)

        def cross_origin_page_streams():
            # a page served from another origin (a second port) calls a `toy serve --api-key`
            # with streaming, as a web front end would: the preflight, the key, the reply read
            key_port, page_port = free_port(), free_port()
            keyed = subprocess.Popen([args.toy, "serve", "-m", args.model, "--port", str(key_port),
                                      "--api-key", "KEY", "--runs-dir", os.path.join(tmp, "runs-keyed")],
                                     stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
            site = os.path.join(tmp, "site")
            os.makedirs(site, exist_ok=True)
            Path(site, "front.html").write_text(FRONT_END_PAGE.replace("API", f"http://127.0.0.1:{key_port}"))
            handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=site)
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", page_port), handler)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            try:
                def keyed_up():
                    try:
                        return urllib.request.urlopen(f"http://127.0.0.1:{key_port}/health", timeout=2).status == 200
                    except OSError:
                        return False
                wait_for(keyed_up, 60, "the keyed server", interval=0.2)
                b.cmd("Page.navigate", url=f"http://127.0.0.1:{page_port}/front.html")
                out = wait_for(lambda: b.js("window.result || null"), 60, "the cross-origin page's result")
                assert out.get("error") is None, out
                assert out["unauthorized"] == 401, out
                assert out["status"] == 200 and out["chunks"] >= 2 and out["text"].strip(), out
                print(f"     cross-origin reply ({out['chunks']} chunks): {out['text'][:60]!r}")
            finally:
                httpd.shutdown()
                os.killpg(keyed.pid, signal.SIGTERM)
                keyed.wait(10)
                b.cmd("Page.navigate", url=base + "/")
                wait_for(lambda: b.js("document.readyState") == "complete", 20, "the page to load again")
        checks.run("a page on another origin streams from toy serve --api-key", cross_origin_page_streams)

        def server_still_serves():
            r = json.load(urllib.request.urlopen(base + "/v1/models", timeout=10))
            assert r["data"], r
        checks.run("the server still serves after the aborted stream", server_still_serves)

        def runs_view():
            b.click("#tab-runs")
            sel = f"#runs-list .run[data-run-id={json.dumps(RUN_ID)}]"
            wait_for(lambda: b.js(f"!!document.querySelector({json.dumps(sel)})"), 10, "the run in #runs-list")
            b.click(sel)
            chart = "[document.querySelector('#loss-chart').dataset.runId, +document.querySelector('#loss-chart').dataset.points," \
                " document.querySelector('#run-summary').textContent]"
            last = []
            try:
                wait_for(lambda: last.append(b.js(chart)) or last[-1][:2] == [RUN_ID, n_points], 10,
                         f"the chart to draw {n_points} points")
            except AssertionError as e:
                raise AssertionError(f"{e}; chart run, points, summary: {last[-1]}") from None
            train_px = b.js("""(() => {
                const c = document.querySelector('#loss-chart'), g = c.getContext('2d');
                const want = getComputedStyle(document.documentElement).getPropertyValue('--train').trim();
                g.fillStyle = want; const hex = g.fillStyle;  // normalised #rrggbb
                const [r, gg, bb] = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
                const d = g.getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 0; i < d.length; i += 4)
                  if (Math.abs(d[i] - r) < 40 && Math.abs(d[i + 1] - gg) < 40 && Math.abs(d[i + 2] - bb) < 40 && d[i + 3] > 128) n++;
                return n; })()""")
            assert train_px > 200, f"only {train_px} pixels of the train-loss colour on the canvas"
            screenshot("runs.png")
        checks.run("the runs view lists the run and draws its loss curves", runs_view)

        def runs_update():
            write_events(events, steps=20, evals=2, start=41)
            want = n_points + 22
            wait_for(lambda: int(b.js("document.querySelector('#loss-chart').dataset.points")) == want,
                     10, f"the chart to grow to {want} points by polling")
            summary = b.js("document.querySelector('#run-summary').textContent")
            assert "step 60" in summary, summary
            screenshot("runs-updated.png")
        checks.run("the chart updates while the run trains", runs_update)

        def runs_resume():
            # resumed from the checkpoint at step 50: steps 51..60 and the eval at 60 are written again
            write_events(events, steps=10, evals=1, start=51, resume=True)
            with open(events, "a") as f:
                f.write(json.dumps({"type": "run_end", "step": 60, "status": "done"}) + "\n")
            want = n_points + 22  # the same points: the repeated steps replace the old ones
            wait_for(lambda: "ended: done" in b.js("document.querySelector('#run-summary').textContent"), 10,
                     "the run_end in the summary")
            points = int(b.js("document.querySelector('#loss-chart').dataset.points"))
            assert points == want, f"{points} points drawn after a resume, expected {want}"
        checks.run("a resumed run replaces the repeated steps", runs_resume)

        def runs_eval_curve():
            # `toy eval lmc ... --run` appends an eval event with metrics: drawn under the loss
            points = [{"alpha": a / 4, "loss": 3.0 + (a * (4 - a)) / 8} for a in range(5)]
            ev = {"type": "eval", "step": 60, "val_loss": 3.0, "sample": "",
                  "metrics": {"name": "lmc", "model": "a.gguf -> b.gguf", "data": "text.txt", "time": 0,
                              "results": {"points": points, "barrier": 0.5, "barrier_alpha": 0.5}}}
            with open(events, "a") as f:
                f.write(json.dumps(ev) + "\n")
            wait_for(lambda: int(b.js("+document.querySelector('#eval-chart').dataset.points")) == 7, 10,
                     "the LMC curve (5 points and the chord) in #eval-chart")
            summary = b.js("document.querySelector('#eval-summary').textContent")
            assert "barrier 0.5000 at alpha 0.5" in summary, summary
            loss_points = int(b.js("document.querySelector('#loss-chart').dataset.points"))
            assert loss_points == n_points + 22, f"the eval event moved the loss chart: {loss_points}"
            screenshot("runs-eval.png")
        checks.run("an eval event's LMC curve is drawn beside the run", runs_eval_curve)

        def vit_run_accuracy_curve():
            # an image classifier's run (`toy train recipes/vit-fashion.toml`): its evaluations
            # carry metrics named "accuracy"; the page draws the val loss and, beside it, the accuracy
            vit_id = "fake-vit-run"
            os.makedirs(os.path.join(runs_dir, vit_id), exist_ok=True)
            lines = [{"type": "run_start", "time": time.time(), "config": {"name": "vit"}, "start_step": 0}]
            for s in range(1, 31):
                lines.append({"type": "step", "step": s, "loss": 2.3 * 0.95 ** s, "lr": 1e-3, "grad_norm": 1.0,
                              "tok_s": 900.0, "time": time.time()})
                if s % 10 == 0:
                    acc = 0.5 + s / 100
                    lines.append({"type": "eval", "step": s, "val_loss": 2.0 * 0.95 ** s,
                                  "sample": f"val accuracy {100 * acc:.2f}%",
                                  "metrics": {"name": "accuracy", "model": "vit", "data": "d/val", "time": 0,
                                              "results": {"top1": acc, "images": 100}}})
            with open(os.path.join(runs_dir, vit_id, "events.jsonl"), "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in lines)
            b.click("#runs-refresh")
            sel = f"#runs-list .run[data-run-id={json.dumps(vit_id)}]"
            wait_for(lambda: b.js(f"!!document.querySelector({json.dumps(sel)})"), 10, "the ViT run in #runs-list")
            b.click(sel)
            wait_for(lambda: b.js("document.querySelector('#loss-chart').dataset.runId") == vit_id
                     and int(b.js("+document.querySelector('#loss-chart').dataset.points")) == 33, 10,
                     "30 train-loss and 3 val-loss points in #loss-chart")
            wait_for(lambda: int(b.js("+document.querySelector('#eval-chart').dataset.points")) == 3
                     and not b.js("document.querySelector('#eval-box').hidden"), 10,
                     "the 3 accuracy points in #eval-chart")
            summary = b.js("document.querySelector('#run-summary').textContent")
            assert "val accuracy 80.00%" in summary, summary
            screenshot("runs-vit.png")
        checks.run("a ViT run draws its accuracy curve beside the loss", vit_run_accuracy_curve)

        def serve_run_shows_requests():
            # the server's own telemetry run (runs/serve-<time>/) holds a line per request made above
            sel = "#runs-list .run[data-run-id^='serve-']"
            wait_for(lambda: b.js(f"!!document.querySelector({json.dumps(sel)})"), 15, "the serve run in #runs-list")
            b.click(sel)
            summary = wait_for(lambda: b.js("(() => { const s = document.querySelector('#run-summary').textContent;"
                                            " return s.includes('requests') ? s : null; })()"), 10, "request stats")
            n_requests = int(summary.split()[0])
            assert n_requests >= 2, summary
            points = int(b.js("document.querySelector('#loss-chart').dataset.points"))
            assert points >= 2, f"{points} points drawn for {summary}"
            screenshot("serve-run.png")
        checks.run("the server's own run lists its requests and draws their latencies", serve_run_shows_requests)

        def no_js_errors():
            b.pump()
            assert not b.exceptions, b.exceptions[0]
        checks.run("no uncaught JavaScript exceptions", no_js_errors)
    except Exception as e:  # noqa: BLE001 - setup failed: count it and stop
        checks.failed += 1
        print(f"FAIL setup: {type(e).__name__}: {e}", flush=True)
    finally:
        if browser:
            browser.close()
        os.killpg(server.pid, signal.SIGTERM)  # the whole group: --server may be a shell around the server
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"browser: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
