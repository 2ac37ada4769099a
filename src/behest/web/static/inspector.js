// behest run inspector: progressive enhancement of server-rendered pages. Served by behest
// itself (no CDN, no build step). Everything from the server is put in the page as text
// (textContent), never as markup: model text and tool output are untrusted.
"use strict";

(function () {
  const RUN_LINK = /^\/runs\/[0-9a-f-]{36}$/;
  const MAX_LIVE_ITEMS = 2000;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function seqLabel(first, last) {
    return "#" + first + (last !== first ? "\u2013" + last : "");
  }

  function openByDefault(item) {
    return item.error || ["text", "tool", "end", "wait", "handoff"].indexOf(item.kind) >= 0;
  }

  // One timeline item, the same structure as the template's macro `item`.
  function render(item) {
    const li = el("li", "item kind-" + item.kind + (item.error ? " error" : ""));
    li.dataset.name = item.name;
    li.dataset.first = item.first;
    li.dataset.last = item.last;
    const details = el("details");
    details.open = openByDefault(item);
    const summary = el("summary");
    summary.append(el("span", "seq", seqLabel(item.first, item.last)), " ",
      el("time", null, item.time), " ", el("b", "title", item.title), " ",
      el("span", "summary", item.summary));
    const body = el("div", "body");
    if (item.delta !== null) {
      li.dataset.delta = "1";
      body.append(el("pre", "delta", item.delta));
    }
    for (const [label, text] of item.sections) {
      body.append(el("h4", null, label), el("pre", null, text));
    }
    if (item.link && RUN_LINK.test(item.link)) {
      const p = el("p");
      const a = el("a", null, "open the run");
      a.href = item.link;
      p.append(a);
      body.append(p);
    }
    details.append(summary, body);
    li.append(details);
    return li;
  }

  // Deltas of one kind that follow each other join the item before them.
  function append(timeline, item) {
    const last = timeline.lastElementChild;
    if (item.delta !== null && last && last.dataset.delta === "1" &&
        last.dataset.name === item.name && Number(last.dataset.last) + 1 === item.first) {
      last.querySelector("pre.delta").textContent += item.delta;
      last.dataset.last = item.last;
      last.querySelector(".seq").textContent = seqLabel(Number(last.dataset.first), item.last);
      return;
    }
    timeline.append(render(item));
  }

  const TERMINAL = ["COMPLETED", "FAILED", "CANCELLED"];

  // The header follows the run: its status; forms that no longer apply go.
  function setStatus(name) {
    const badge = document.getElementById("run-status");
    if (!badge || !name) return;
    badge.textContent = name;
    badge.className = "status st-" + name.toLowerCase();
    const gone = [];
    if (name !== "WAITING_FOR_INPUT") gone.push("section.waiting");
    if (TERMINAL.indexOf(name) >= 0) gone.push("form.cancel");
    gone.forEach(function (selector) {
      document.querySelectorAll(selector).forEach(function (node) { node.remove(); });
    });
  }

  function follow(timeline) {
    const state = document.getElementById("live-state");
    const url = timeline.dataset.live + "?after=" + encodeURIComponent(timeline.dataset.after);
    const source = new EventSource(url);
    let opened = 0;
    timeline.dataset.reconnects = "0";
    source.addEventListener("open", function () {
      opened += 1;
      if (opened > 1) timeline.dataset.reconnects = String(opened - 1);
      if (state) state.textContent = opened > 1 ? "live (reconnected " + (opened - 1) + "\u00d7)" : "live";
    });
    source.addEventListener("item", function (message) {
      const item = JSON.parse(message.data);
      if (Number(timeline.dataset.after) >= item.first) return; // already shown
      append(timeline, item);
      timeline.dataset.after = item.last;
      const count = document.getElementById("event-count");
      if (count && Number(count.textContent) < item.last) count.textContent = item.last;
      setStatus(item.status);
      if (timeline.childElementCount >= MAX_LIVE_ITEMS) {
        source.close(); // the page stays small: the rest is on the later pages
        if (state) state.textContent = "paused: many new events \u2014 reload for the later pages";
      }
    });
    source.addEventListener("end", function () {
      source.close();
      timeline.dataset.ended = "1";
      if (state) {
        state.textContent = "ended \u2014 reload for the final usage";
        state.className = "ended";
      }
    });
    source.addEventListener("error", function () {
      if (state && source.readyState !== EventSource.CLOSED) state.textContent = "reconnecting\u2026";
      if (state && source.readyState === EventSource.CLOSED) state.textContent = "disconnected";
    });
  }

  function toggles() {
    const expand = document.getElementById("expand-all");
    const collapse = document.getElementById("collapse-all");
    const all = function (open) {
      document.querySelectorAll("#timeline details").forEach(function (d) { d.open = open; });
    };
    if (expand) expand.addEventListener("click", function () { all(true); });
    if (collapse) collapse.addEventListener("click", function () { all(false); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.documentElement.classList.add("js");
    toggles();
    const timeline = document.getElementById("timeline");
    if (timeline && timeline.dataset.live) follow(timeline);
  });
})();
