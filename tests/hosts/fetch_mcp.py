"""A stdio MCP server with one tool, `fetch {url, method}`, for the whole-agent tests: it makes the
request from wherever the host started it (inside `sluice agent`'s boundary: through the proxy
variables, as any HTTP client there would) and answers with the status and body, or the error.

usage: fetch_mcp.py   (mcp_stdio.py beside it)"""
import urllib.error
import urllib.request

from mcp_stdio import serve


def fetch(args):
    url, method = args.get("url", ""), args.get("method", "GET")
    try:
        req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            return "status=%d body=%s" % (r.status, r.read(200).decode(errors="replace"))
    except urllib.error.HTTPError as e:
        return "status=%d body=%s" % (e.code, e.read(300).decode(errors="replace"))
    except Exception as e:  # what the host's model would see
        return "error=%s" % e


serve("net", [{"name": "fetch", "description": "Fetch a URL",
               "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}, "method": {"type": "string"}},
                               "required": ["url"]}}], fetch)
