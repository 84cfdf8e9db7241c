"""The live page driven for real: Debian's headless Chromium over the DevTools protocol (a
WebSocket), for the approvals inbox."""
import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request

import websockets

from harness import free_port

CHROMIUM = "/usr/bin/chromium"


def start_chromium(procs, case):
    """Headless Chromium with DevTools on a free loopback port; appended to `procs` (stopped with
    them), its profile removed with `case`. The port."""
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    case.addCleanup(shutil.rmtree, profile, True)
    port = free_port()
    browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                "--user-data-dir=" + profile, "--remote-debugging-address=127.0.0.1",
                                "--remote-debugging-port=%d" % port, "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(browser)
    return port


async def drive_page(port, url, request_id, decision="once"):
    """Opens `url` in the browser listening for DevTools on `port`, waits for the inbox row of
    `request_id` and clicks its button for `decision`. True once clicked; for "always", the text
    the confirmation shows, after clicking "write them"."""
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/json/new?about:blank" % port,
                                                               method="PUT"), timeout=5) as resp:
                target = json.load(resp)
            break
        except OSError:
            if time.time() > deadline:
                raise
            await asyncio.sleep(0.2)
    async with websockets.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
        n = 0

        async def call(method, **params):
            nonlocal n
            n += 1
            await ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == n:
                    return msg.get("result", {})
        await call("Page.navigate", url=url)
        button = ('document.querySelector(\'#inbox tr[data-id="%d"] button[data-decision="%s"]\')'
                  % (request_id, decision))
        while time.time() < deadline:
            found = await call("Runtime.evaluate", expression=button + " !== null", returnByValue=True)
            if found.get("result", {}).get("value"):
                await call("Runtime.evaluate", expression=button + ".click()")
                break
            await asyncio.sleep(0.1)
        else:
            return False
        if decision != "always":
            return True
        # The confirmation: the block and the file, shown until "write them" is clicked.
        await asyncio.sleep(1.2)    # two refreshes of the inbox: the confirmation stays
        shown = await call("Runtime.evaluate", returnByValue=True,
                           expression='document.getElementById("always").hidden ? null : '
                                      'document.getElementById("always-text").textContent')
        await call("Runtime.evaluate", expression='document.getElementById("always-write").click()')
        return shown.get("result", {}).get("value")
