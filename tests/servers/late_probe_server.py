"""A server slow to start: it answers hostpipe's `server/discover` probe only after rmcp
has given up on it (10 s) and sent `initialize`, and its answer is the error an older
server gives (-32601, method not found). Started again, it is the official SDK's kb
server (kb_server.py), which hostpipe must now reach with `initialize` alone.

The first start is told apart by the file named by argv[1]: absent, this start creates
it and plays slow; present, the script becomes kb_server.py. stdio.
"""
import json
import os
import sys

mark = sys.argv[1]
if os.path.exists(mark):
    here = os.path.dirname(os.path.abspath(__file__))
    os.execv(sys.executable, [sys.executable, os.path.join(here, "kb_server.py")])

open(mark, "w").close()
probe = json.loads(sys.stdin.readline())  # server/discover, id 0
sys.stdin.readline()  # initialize, id 1: rmcp gave up on the probe
error = {"code": -32601, "message": f"Method not found: {probe.get('method')}"}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": probe["id"], "error": error}) + "\n")
sys.stdout.flush()
# Say nothing more: hostpipe stops this process and starts the server again.
sys.stdin.read()
