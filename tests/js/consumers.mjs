// nats.js 3.x consumers: node consumers.mjs <nats-url>
//
// Creates a stream and a durable pull consumer, reads with consume() and fetch() (acking each
// message), reads an ordered consumer, and prints one JSON object on stdout: what each read
// got and the consumer's numbers afterwards. tests/js/test_nats_js.py runs it against
// nats-server and jetraft and compares. Any error exits with code 1 and a message on stderr.
import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";

const STREAM = "JSCONS";
const TIMEOUT_MS = 5000;
const MSGS = 10;

function brief(m) {
  return { subject: m.subject, seq: m.seq, data: new TextDecoder().decode(m.data), redelivered: m.redelivered };
}

async function main(url) {
  const nc = await connect({ servers: url, timeout: TIMEOUT_MS, reconnect: false });
  try {
    const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
    await jsm.streams.add({ name: STREAM, subjects: ["cons.>"] });
    const js = jetstream(nc, { timeout: TIMEOUT_MS });
    for (let i = 0; i < MSGS; i++) {
      await js.publish(`cons.${i % 2 === 0 ? "even" : "odd"}`, `m${i}`);
    }
    await jsm.consumers.add(STREAM, { durable_name: "work", ack_policy: AckPolicy.Explicit });
    const consumer = await js.consumers.get(STREAM, "work");

    const consumed = [];
    const messages = await consumer.consume({ max_messages: 3, expires: 2000 });
    for await (const m of messages) {
      consumed.push(brief(m));
      m.ack();
      if (consumed.length === 6) break;
    }

    const fetched = [];
    const batch = await consumer.fetch({ max_messages: 10, expires: 1000 });
    for await (const m of batch) {
      fetched.push(brief(m));
      await m.ackAck();
    }

    const ordered = [];
    const oc = await js.consumers.get(STREAM, { filter_subjects: ["cons.odd"] });
    const omsgs = await oc.fetch({ max_messages: 5, expires: 1000 });
    for await (const m of omsgs) ordered.push(brief(m));

    const info = await consumer.info();
    const out = {
      consumed,
      fetched,
      ordered,
      info: {
        delivered: info.delivered.stream_seq,
        ack_floor: info.ack_floor.stream_seq,
        num_ack_pending: info.num_ack_pending,
        num_pending: info.num_pending,
      },
    };
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    await nc.close();
  }
}

main(process.argv[2]).catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
