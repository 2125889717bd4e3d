// nats.js 3.x key/value and object store: node kv_obj.mjs <nats-url>
//
// A bucket: puts, a delete, keys(), history(), a watcher (initial values, then live updates
// including a delete) and purgeDeletes(); an object store: a chunked object put, read back,
// listed, described and deleted. Prints one JSON object; tests/js/test_nats_js.py runs it
// against nats-server and jetraft and compares. Any error exits with code 1.
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";

const TIMEOUT_MS = 5000;
const OBJECT_BYTES = 300_000; // several chunks
const dec = new TextDecoder();

function entry(e) {
  return { key: e.key, value: dec.decode(e.value), operation: e.operation, revision: e.revision };
}

async function withTimeout(promise, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), TIMEOUT_MS);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

async function kvPart(nc) {
  const kvm = new Kvm(nc);
  const kv = await kvm.create("JSKV", { history: 5 });
  await kv.put("a", "1");
  await kv.put("b", "2");
  await kv.put("a", "3");
  await kv.delete("b");
  const keys = [];
  for await (const k of await kv.keys()) keys.push(k);
  const history = [];
  for await (const e of await kv.history({ key: "a" })) history.push(entry(e));
  const watched = [];
  const iter = await kv.watch();
  const done = (async () => {
    for await (const e of iter) {
      watched.push(entry(e));
      if (e.key === "c" && e.operation === "DEL") break;
    }
  })();
  await kv.put("c", "9");
  await kv.delete("c");
  await withTimeout(done, "watch");
  const purged = await kv.purgeDeletes(-1);
  const got = await kv.get("a");
  return { keys: keys.sort(), history, watched, purged: purged.purged, a: dec.decode(got.value) };
}

async function objPart(nc) {
  const objm = new Objm(nc);
  const os = await objm.create("JSOBJ");
  const data = new Uint8Array(OBJECT_BYTES).map((_, i) => i % 251);
  await os.putBlob({ name: "blob" }, data);
  const back = await os.getBlob("blob");
  const same = back.length === data.length && back.every((v, i) => v === data[i]);
  const listed = (await os.list()).map((i) => i.name);
  const info = await os.info("blob");
  await os.delete("blob");
  const after = await os.info("blob");
  return { same, listed, size: info.size, chunks: info.chunks, deleted: after === null || after.deleted === true };
}

async function main(url) {
  const nc = await connect({ servers: url, timeout: TIMEOUT_MS, reconnect: false });
  try {
    const out = { kv: await kvPart(nc), obj: await objPart(nc) };
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    await nc.close();
  }
}

main(process.argv[2]).catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
