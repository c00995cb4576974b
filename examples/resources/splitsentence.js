// Splits each sentence into words, anchored to the sentence; acks it once the worker has told where every
// word went (task ids), so the test sees emits, task id replies, acks, logs and heartbeats from Node.js.
"use strict";
const {BasicBolt} = require("./multilang.js");

class SplitSentence extends BasicBolt {
  initialize(conf, context) {
    this.log("splitsentence.js ready as task " + context.taskid + " of " + context.componentid);
  }

  process(tup) {
    const words = String(tup.tuple[0]).split(" ").filter((w) => w.length > 0);
    let waiting = words.length;
    let delivered = true;
    if (waiting === 0) {
      this.ack(tup.id);
      return;
    }
    for (const word of words) {
      this.emit([word], [tup.id], (taskIds) => {
        delivered = delivered && taskIds.length === 1;
        if (--waiting === 0) delivered ? this.ack(tup.id) : this.fail(tup.id);
      });
    }
  }
}

new SplitSentence().run();
