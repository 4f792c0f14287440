// One EventSource per open run: GET /api/runs/{run}/stream?after_step=N (server-sent events).
// The browser's EventSource reconnects by itself and sends Last-Event-ID, so the server resumes
// exactly; if the stream is closed for good (an HTTP error), we reopen it with ?cursor=<last id>.
// Steps at or below the last one delivered are ignored, so a step never reaches a chart twice.
// Subscribers get the buffered recent messages replayed, so a view mounted after the stream opened
// misses nothing (it ignores the steps it already fetched).

import { TOKEN_EVENT, TOKEN_KEY } from "./api.js";

const KINDS = ["step", "finding", "phase", "event", "run"];
const BUFFER = 5000;
const RETRY_MS = [1000, 2000, 5000, 10000];

function endedSession(data) {
  try {
    return JSON.parse(data).code === "unauthorized";
  } catch {
    return false;
  }
}

export class LiveRun {
  constructor(runId, afterStep) {
    this.runId = runId;
    this.lastStep = Number.isFinite(afterStep) ? afterStep : -1;
    this.cursor = null;
    this.buffer = [];
    this.listeners = new Set();
    this.state = "connecting";
    this.stateListeners = new Set();
    this.retries = 0;
    this.closed = false;
    // a new user in this tab (or another tab of the cockpit) reconnects the stream with their token
    this.onToken = (e) => { if (!e.key || e.key === TOKEN_KEY) this.reauth(); };
    window.addEventListener(TOKEN_EVENT, this.onToken);
    window.addEventListener("storage", this.onToken);
    this.open();
  }

  // The stream goes on under the token stored now: reopened from the last message received
  // (?cursor=), so nothing is missed or delivered twice. A stream closed because its session
  // ended opens again once there is a new token.
  reauth() {
    const token = localStorage.getItem(TOKEN_KEY);
    if (token === this.token || (this.closed && this.disposed)) return;
    if (this.source) this.source.close();
    clearTimeout(this.timer);
    this.closed = false;
    this.retries = 0;
    this.setState("connecting");
    this.open();
  }

  url() {
    const q = new URLSearchParams();
    if (this.cursor) q.set("cursor", this.cursor);
    else if (this.lastStep >= 0) q.set("after_step", String(this.lastStep));
    // EventSource cannot send an Authorization header; with a stored token it goes in the URL
    const token = localStorage.getItem(TOKEN_KEY);
    this.token = token;
    if (token) q.set("access_token", token);
    const s = q.toString();
    return `/api/runs/${encodeURIComponent(this.runId)}/stream${s ? `?${s}` : ""}`;
  }

  open() {
    const source = new EventSource(this.url());
    this.source = source;
    source.onopen = () => {
      this.retries = 0;
      this.setState("open");
    };
    source.onerror = (e) => {
      // `event: error` from the server is a message (a failed poll; the stream goes on), not a drop,
      // unless it says the token or session ended (revoked, expired): then the server closed the
      // stream for good and reconnecting would only be refused
      if (e && e.data) {
        if (endedSession(e.data)) {
          this.closed = true;
          source.close();
          this.setState("reconnecting");
        }
        return;
      }
      if (source.readyState === EventSource.CLOSED) this.reopenLater();
      else this.setState("reconnecting");
    };
    for (const kind of KINDS) source.addEventListener(kind, (msg) => this.receive(kind, msg));
  }

  reopenLater() {
    this.setState("reconnecting");
    if (this.closed) return;
    const delay = RETRY_MS[Math.min(this.retries, RETRY_MS.length - 1)];
    this.retries += 1;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => !this.closed && this.open(), delay);
  }

  receive(kind, msg) {
    let data;
    try {
      data = JSON.parse(msg.data);
    } catch {
      return; // a malformed message is skipped; the next one carries on
    }
    if (msg.lastEventId) this.cursor = msg.lastEventId;
    if (kind === "step") {
      if (!(data.step > this.lastStep)) return;
      this.lastStep = data.step;
    }
    const item = { kind, data };
    this.buffer.push(item);
    if (this.buffer.length > BUFFER) this.buffer.splice(0, this.buffer.length - BUFFER);
    this.listeners.forEach((fn) => fn(item));
  }

  // fn({kind, data}); returns an unsubscribe function. Buffered messages are replayed first.
  subscribe(fn, { replay = true } = {}) {
    if (replay) this.buffer.forEach((item) => fn(item));
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  onState(fn) {
    fn(this.state);
    this.stateListeners.add(fn);
    return () => this.stateListeners.delete(fn);
  }

  setState(state) {
    this.state = state;
    this.stateListeners.forEach((fn) => fn(state));
  }

  close() {
    this.closed = true;
    this.disposed = true;
    window.removeEventListener(TOKEN_EVENT, this.onToken);
    window.removeEventListener("storage", this.onToken);
    clearTimeout(this.timer);
    if (this.source) this.source.close();
    this.listeners.clear();
    this.stateListeners.clear();
  }
}
