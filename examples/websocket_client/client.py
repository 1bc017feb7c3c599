"""Call a Parley agent over its plain WebSocket (/ws): say a WAV file to it, print what was
said both ways, and write the agent's voice to another WAV file.

    python client.py ws://127.0.0.1:7860/ws question.wav answer.wav [--api-key KEY]

The question must be 16 kHz mono 16-bit PCM (ffmpeg -i in.mp3 -ar 16000 -ac 1 question.wav).
Needs only the `websockets` package. The protocol: docs/websocket.md.
"""

import argparse
import asyncio
import json
import time
import wave

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

RATE = 16000
FRAME = 640  # bytes: 20 ms of 16 kHz mono s16


async def microphone(ws: ClientConnection, pcm: bytes) -> None:
    """Send ``pcm`` as a microphone would: 20 ms every 20 ms, in real time."""
    start = time.monotonic()
    for n, at in enumerate(range(0, len(pcm), FRAME)):
        await ws.send(pcm[at : at + FRAME])
        await asyncio.sleep(max(0.0, start + (n + 1) * 0.02 - time.monotonic()))


async def speaker(ws: ClientConnection, heard: bytearray) -> None:
    """Keep the agent's audio (a player would queue it) and print its events."""
    async for message in ws:
        if isinstance(message, bytes):
            heard += message  # 20 ms of 16 kHz mono s16, paced
            continue
        event = json.loads(message)
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "audio-clear":
            print("(the caller spoke over the agent: a player drops what it has queued)")
        elif kind == "user-transcription" and data.get("final"):
            print("you:", data["text"])
        elif kind == "bot-output" and data.get("spoken"):
            print("agent:", data["text"])
        elif kind in ("error", "error-response"):
            print("error:", data.get("error"))


async def call(url: str, question: str, answer: str, api_key: str | None, listen: float) -> int:
    with wave.open(question) as src:
        if (src.getframerate(), src.getnchannels(), src.getsampwidth()) != (RATE, 1, 2):
            raise SystemExit(f"{question}: want 16 kHz mono 16-bit PCM")
        pcm = src.readframes(src.getnframes())
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    heard = bytearray()
    try:
        ws = await connect(url, additional_headers=headers)
    except InvalidStatus as exc:  # refused before the upgrade: no or a wrong API key
        body = exc.response.body.decode(errors="replace")
        print(f"refused by the server: HTTP {exc.response.status_code} {body}")
        return 1
    async with ws:
        listening = asyncio.create_task(speaker(ws, heard))
        ready = {"version": "1.0.0", "about": {"library": "parley-example"}}
        try:  # client-ready; the question, then silence while the agent answers
            await ws.send(json.dumps({"label": "rtvi-ai", "type": "client-ready",
                                      "id": "ready-1", "data": ready}))  # fmt: skip
            await microphone(ws, pcm + bytes(int(RATE * listen) * 2))
        except ConnectionClosed:
            pass  # the server ended the call: its code and reason are below
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
    with wave.open(answer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(heard)
    print(f"{len(heard) / (2 * RATE):.1f} s of the agent's voice in {answer}")
    if ws.close_code != 1000:  # we close with 1000; anything else is the server's reason
        print(f"closed by the server: {ws.close_code} {ws.close_reason}")
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="ws://host:7860/ws (wss:// behind TLS)")
    parser.add_argument("question", help="a WAV file: 16 kHz, mono, 16-bit")
    parser.add_argument("answer", help="the WAV file to write the agent's voice to")
    parser.add_argument("--api-key", help="one of the server's PARLEY_API_KEYS")
    parser.add_argument("--listen", type=float, default=8.0, help="seconds after the question")
    args = parser.parse_args()
    code = asyncio.run(call(args.url, args.question, args.answer, args.api_key, args.listen))
    raise SystemExit(code)


if __name__ == "__main__":
    main()
