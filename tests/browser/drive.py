"""Drive the harness page in headless Chromium and print what happened as JSON.

Needs Python Playwright (the pip wheel's driver, no browser download) and Debian's chromium.
The server must already run with PARLEY_STATIC_DIR pointing at the built dist/ folder.

    python drive.py --base http://127.0.0.1:8765 --mode offer --wav /tmp/speech.wav
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import urllib.request
import wave
from pathlib import Path

from playwright.sync_api import Request, sync_playwright


def make_wav(path: Path, text: str, before: float = 0.5, after: float = 1.5) -> None:
    """Speak ``text`` with espeak-ng, padded with silence (the fake mic starts at getUserMedia)."""
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    with wave.open(str(raw)) as w:
        params, frames = w.getparams(), w.readframes(w.getnframes())
    pad = lambda s: b"\0" * (int(s * params.framerate) * params.sampwidth * params.nchannels)  # noqa: E731
    with wave.open(str(path), "wb") as w:
        w.setparams(params)
        w.writeframes(pad(before) + frames + pad(after))
    raw.unlink()


FLAGS = [
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def describe(request: Request) -> dict:
    """One HTTP call the page made: method, url, and for non-GET the status and body."""
    if request.method == "GET":
        return {"method": "GET", "url": request.url}
    response = request.response()
    status = response.status if response else None
    return {
        "method": request.method,
        "url": request.url,
        "status": status,
        "body": request.post_data,
    }


def sessions(base: str) -> list[dict]:
    with urllib.request.urlopen(f"{base}/api/sessions", timeout=5) as r:
        return json.load(r)["sessions"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="http://127.0.0.1:8765")
    ap.add_argument("--mode", choices=["offer", "start"], default="offer")
    ap.add_argument("--wav", type=Path, default=Path("/tmp/parley-speech.wav"))
    ap.add_argument("--text", default="Hello there, this is a test.")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--listen", type=float, default=8.0, help="seconds to wait for the echo")
    args = ap.parse_args()
    if not args.wav.exists():
        make_wav(args.wav, args.text)

    report: dict = {"mode": args.mode, "http": [], "console": []}
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            profile,  # a fresh --user-data-dir
            executable_path=args.chromium,
            headless=True,
            ignore_default_args=["--mute-audio"],
            args=[*FLAGS, f"--use-file-for-fake-audio-capture={args.wav.resolve()}%noloop"],
        )
        page = browser.pages[0] if browser.pages else browser.new_page()
        page.on("console", lambda m: report["console"].append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: report["console"].append(f"pageerror: {e}"))
        page.on("requestfinished", lambda r: report["http"].append(describe(r)))
        page.goto(f"{args.base}/")
        page.wait_for_function("window.harness !== undefined")

        report["connect"] = page.evaluate("m => harness.connect(m)", args.mode)
        time.sleep(args.listen)  # speech plays, the server echoes it back
        report["sessions_during"] = sessions(args.base)
        report["audio"] = page.evaluate("window.audio")
        report["echo"] = page.evaluate("harness.echo({hello: 'world', n: 1})")
        report["disconnect"] = page.evaluate("harness.disconnect()")
        gone_at = None
        for i in range(20):
            if not sessions(args.base):
                gone_at = i * 0.1
                break
            time.sleep(0.1)
        report["sessions_gone_after_s"] = gone_at
        report["events"] = page.evaluate("window.events")
        report["wire"] = page.evaluate("window.wire")
        report["timings"] = page.evaluate("harness.timings")
        browser.close()

    for r in report["http"]:  # SDP bodies are long; keep their first line
        if r.get("body") and '"sdp"' in r["body"]:
            r["body"] = r["body"][:160] + "…"
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
