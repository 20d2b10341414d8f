"""Seeds each fuzz target's corpus from the test corpora (tests/corpus/*.jsonl) and snapshots."""
import glob, json, os, struct, hashlib

root = os.path.join(os.path.dirname(__file__), "..")
bodies = []
for path in glob.glob(os.path.join(root, "tests/corpus/*.jsonl")):
    for line in open(path, encoding="utf-8"):
        if line.strip():
            bodies.append(json.loads(line)["body"].encode("utf-8", "surrogatepass"))
snapshots = [open(p, "rb").read() for p in glob.glob(os.path.join(root, "examples/strategies/*.json"))]

def put(target, data):
    d = os.path.join(root, "fuzz/corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)

for b in bodies:
    put("parse_json", b)
    put("parse_text", b)
    # engine layout: [selector][now:8][ct][snapshot-len:2][snapshot][body]
    put("engine", bytes([0]) + struct.pack("<q", 1705676400000) + bytes([1]) + struct.pack("<H", 0) + b)
    put("ffi", b)
for s in snapshots:
    put("snapshot", s)
    put("engine", bytes([0]) + struct.pack("<q", 1705676400000) + bytes([1]) + struct.pack("<H", len(s)) + s + bodies[0])
print(f"seeded {len(bodies)} bodies and {len(snapshots)} snapshots")
