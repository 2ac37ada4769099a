// behest run inspector: progressive enhancement of server-rendered pages. Served by behest
// itself (no CDN, no build step). Everything from the server is put in the page as text
// (textContent), never as markup: model text and tool output are untrusted.
"use strict";

(function () {
  const RUN_LINK = /^\/runs\/[0-9a-f-]{36}$/;
  const RUN_ID = /^[0-9a-f-]{36}$/;
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

  // The header follows the run: its status; forms that no longer apply go. A run that comes
  // to wait while the page is open says so (the page shows the forms once reloaded).
  function setStatus(name, runLink) {
    const badge = document.getElementById("run-status");
    if (!badge || !name) return;
    badge.textContent = name;
    badge.className = "status st-" + name.toLowerCase();
    const gone = [];
    if (name !== "WAITING_FOR_INPUT") gone.push("section.waiting", "#waiting-notice");
    if (TERMINAL.indexOf(name) >= 0) gone.push("form.cancel");
    gone.forEach(function (selector) {
      document.querySelectorAll(selector).forEach(function (node) { node.remove(); });
    });
    const header = document.getElementById("run-header");
    const shown = document.querySelector("section.waiting, #waiting-notice");
    if (name === "WAITING_FOR_INPUT" && header && !shown && RUN_LINK.test(runLink)) {
      const notice = el("p", "waiting-notice", "The run waits for an answer: ");
      notice.id = "waiting-notice";
      const reload = el("a", null, "reload the page to answer");
      reload.href = runLink;
      notice.append(reload);
      header.after(notice);
    }
  }

  // A waiting call was answered (here or elsewhere): its form goes, and the section once empty.
  function resolved(callId) {
    const pending = byData(document, ".pending", "call", callId);
    if (pending) pending.remove();
    const section = document.querySelector("section.waiting");
    if (section && !section.querySelector(".pending")) section.remove();
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
      if (item.resolves) resolved(item.resolves);
      setStatus(item.status, timeline.dataset.live.replace(/\/live$/, ""));
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

  // --- a session as a chat, followed live -------------------------------------------------

  function byData(root, selector, name, value) {
    return root.querySelector(selector + "[data-" + name + "=\"" + CSS.escape(value) + "\"]");
  }

  function runLink(runId, text) {
    const a = el("a", null, text);
    if (RUN_ID.test(runId)) a.href = "/runs/" + runId;
    return a;
  }

  function statusBadge(name) {
    return el("span", "status st-" + name.toLowerCase(), name);
  }

  // One message, the same structure as session.html's macro `message`.
  function renderMessage(m) {
    const article = el("article", "msg role-" + m.role + (m.is_error ? " error" : "") +
      (m.steered ? " steered" : ""));
    article.dataset.message = m.id;
    const header = el("header");
    header.append(el("b", null, m.role));
    if (m.steered) header.append(" ", el("span", "steered-mark", "steered into the running run"));
    if (m.tool_name) header.append(" \u00b7 " + m.tool_name + " ", el("code", null, m.tool_call_id));
    if (m.summary_through !== null) header.append(" \u00b7 summary of messages up to " + m.summary_through);
    const where = m.position !== null ? "#" + m.position + " \u00b7 " : "";
    header.append(" ", el("span", "meta", where + m.time));
    article.append(header);
    if (m.text) article.append(el("pre", null, m.text));
    for (const call of m.calls) {
      const div = el("div", "call", "calls ");
      div.append(el("b", null, call.name), " ", el("code", null, call.id), el("pre", null, call.arguments));
      article.append(div);
    }
    return article;
  }

  function noteOf(note) {
    const span = el("span", "note note-" + note.kind, note.words + " run ");
    span.append(runLink(note.run_id, note.run_id.slice(0, 8)), note.after);
    return span;
  }

  // The run's turn, made when the page has none yet (a run started after the page).
  function turnOf(turns, item) {
    let turn = byData(turns, "section.turn", "run", item.run);
    if (turn) return turn;
    const empty = turns.querySelector(".empty");
    if (empty) empty.remove();
    turn = el("section", "turn");
    turn.dataset.run = item.run;
    const head = el("header", "turn-head");
    head.append(runLink(item.run, "run " + item.run.slice(0, 8)));
    for (const note of item.notes) head.append(" ", noteOf(note));
    turn.append(head);
    turns.append(turn);
    const runs = document.getElementById("session-runs");
    if (runs && !byData(runs, "li", "run", item.run)) {
      const li = el("li");
      li.dataset.run = item.run;
      li.append(runLink(item.run, item.run.slice(0, 8)), " ", statusBadge(item.status || "PENDING"));
      runs.prepend(li);
    }
    return turn;
  }

  function setRunStatus(turn, runId, name) {
    const head = turn.querySelector(".turn-head");
    const old = head.querySelector(".status");
    if (old) old.replaceWith(statusBadge(name));
    else head.querySelector("a").after(" ", statusBadge(name));
    const runs = document.getElementById("session-runs");
    const li = runs && byData(runs, "li", "run", runId);
    const badge = li && li.querySelector(".status");
    if (badge) badge.replaceWith(statusBadge(name));
  }

  // The answer as it streams, until its message is stored.
  function streaming(turn) {
    let bubble = turn.querySelector("article.streaming");
    if (!bubble) {
      bubble = el("article", "msg role-assistant streaming");
      bubble.append(el("header", null, "assistant (streaming)"), el("pre", "delta", ""));
      turn.append(bubble);
    }
    return bubble;
  }

  function addMessage(turns, turn, m) {
    const bubble = m.role === "assistant" ? turn.querySelector("article.streaming") : null;
    if (byData(turns, "article", "message", m.id)) { // the page shows it already
      if (bubble) bubble.remove();
      return;
    }
    if (bubble) bubble.replaceWith(renderMessage(m));
    else turn.append(renderMessage(m));
  }

  function showChatItem(turns, item) {
    const turn = turnOf(turns, item);
    if (item.status) setRunStatus(turn, item.run, item.status);
    if (item.shows === "run") {
      for (const note of item.notes) {
        const gone = note.kind === "rolled_back" && byData(turns, "section.turn", "run", note.run_id);
        if (gone) gone.classList.add("rolled-back");
      }
      if (item.message) addMessage(turns, turn, item.message);
    } else if (item.shows === "text") {
      streaming(turn).querySelector("pre.delta").textContent += item.delta;
    } else if (item.shows === "message") {
      addMessage(turns, turn, item.message);
    } else if (item.shows === "line" || item.shows === "end") {
      const bubble = item.shows === "end" ? turn.querySelector("article.streaming") : null;
      if (bubble) {
        bubble.classList.replace("streaming", "unfinished");
        bubble.querySelector("header").textContent = "assistant (unfinished: the run ended first)";
      }
      turn.append(el("p", "line" + (item.error ? " error" : ""), item.line));
    }
  }

  function followSession(chat) {
    const state = document.getElementById("live-state");
    const turns = document.getElementById("turns");
    const after = chat.dataset.after;
    const source = new EventSource(chat.dataset.live + (after ? "?after=" + encodeURIComponent(after) : ""));
    let opened = 0;
    let added = 0;
    chat.dataset.reconnects = "0";
    source.addEventListener("open", function () {
      opened += 1;
      if (opened > 1) chat.dataset.reconnects = String(opened - 1);
      if (state) state.textContent = opened > 1 ? "live (reconnected " + (opened - 1) + "\u00d7)" : "live";
    });
    source.addEventListener("item", function (message) {
      const item = JSON.parse(message.data);
      showChatItem(turns, item);
      chat.dataset.last = message.lastEventId;
      if (item.shows && item.shows !== "text") added += 1;
      if (added >= MAX_LIVE_ITEMS) {
        source.close(); // the page stays small: the rest is on the later pages
        if (state) state.textContent = "paused: much new \u2014 reload for the later pages";
      }
    });
    source.addEventListener("end", function () {
      source.close();
      chat.dataset.ended = "1";
      if (state) {
        state.textContent = "ended: the session is gone";
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
    const chat = document.getElementById("transcript");
    if (chat && chat.dataset.live) followSession(chat);
  });
})();
