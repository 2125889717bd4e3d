// nats.js 3.x smoke test: node smoke.mjs <nats-url>
//
// Connects, creates a stream with allow_direct, publishes three messages (one with a header), reads them back with
// STREAM.MSG.GET and Direct Get (by seq and by last subject, plus one miss), and prints one
// JSON object on stdout. tests/js/test_nats_js.py runs it against nats-server and jetraft and
// checks the output; any error exits with code 1 and a message on stderr.
import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const STREAM = "JSSMOKE";
const TIMEOUT_MS = 5000;

function msgToJson(m) {
  if (m === null) return null;
  const headers = {};
  if (m.header) {
    for (const [key, values] of m.header) headers[key] = values;
  }
  return {
    subject: m.subject,
    seq: m.seq,
    data: new TextDecoder().decode(m.data),
    headers,
    has_time: m.time instanceof Date && !Number.isNaN(m.time.getTime()),
  };
}

async function main(url) {
  const nc = await connect({ servers: url, timeout: TIMEOUT_MS, reconnect: false });
  try {
    const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
    const created = await jsm.streams.add({
      name: STREAM,
      subjects: ["smoke.>"],
      allow_direct: true,
    });
    const js = jetstream(nc, { timeout: TIMEOUT_MS });
    const acks = [];
    const fooBar = headers();
    fooBar.set("Foo", "bar");
    for (const [subject, body, hdrs] of [
      ["smoke.a", "one", fooBar],
      ["smoke.b", "two", undefined],
      ["smoke.a", "three", undefined],
    ]) {
      const pa = await js.publish(subject, body, hdrs ? { headers: hdrs } : {});
      acks.push({ stream: pa.stream, seq: pa.seq, duplicate: pa.duplicate });
    }
    const result = {
      created: {
        name: created.config.name,
        allow_direct: created.config.allow_direct,
        storage: created.config.storage,
      },
      acks,
      msg_get: msgToJson(await jsm.streams.getMessage(STREAM, { seq: 2 })),
      msg_get_last: msgToJson(
        await jsm.streams.getMessage(STREAM, { last_by_subj: "smoke.a" }),
      ),
      direct_seq: msgToJson(await jsm.direct.getMessage(STREAM, { seq: 1 })),
      direct_last: msgToJson(
        await jsm.direct.getMessage(STREAM, { last_by_subj: "smoke.a" }),
      ),
      direct_missing: msgToJson(await jsm.direct.getMessage(STREAM, { seq: 99 })),
      state: (await jsm.streams.info(STREAM)).state,
    };
    process.stdout.write(JSON.stringify(result) + "\n");
  } finally {
    await nc.close();
  }
}

const url = process.argv[2];
if (!url) {
  process.stderr.write("usage: node smoke.mjs <nats-url>\n");
  process.exit(2);
}
main(url).catch((err) => {
  process.stderr.write(`smoke failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
