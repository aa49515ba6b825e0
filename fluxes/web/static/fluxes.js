// fluxes web: the time bar, the play mode and live updates. Plain JavaScript,
// no library: the server renders every page; this script only fetches the
// same page again (for another moment, or after a journal event) and swaps
// its <main> in.
"use strict";

(function () {
  const body = document.body;
  const slider = document.getElementById("slider");
  const atField = document.getElementById("at");
  const when = document.getElementById("when");
  const status = document.getElementById("live-status");
  let playing = null;

  function pad(n) { return String(n).padStart(2, "0"); }
  function fmt(t) {
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function currentAt() {
    const at = body.dataset.at;
    return at ? parseFloat(at) : null;
  }
  function urlAt(t) {
    const url = new URL(window.location.href);
    if (t === null) { url.searchParams.delete("at"); } else { url.searchParams.set("at", String(t)); }
    return url;
  }

  // Fetch the page for another moment and swap its main part in (no reload).
  async function show(t) {
    const url = urlAt(t);
    const response = await fetch(url, {headers: {"Accept": "text/html"}});
    if (!response.ok) { return false; }
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const main = doc.getElementById("main");
    if (main) { document.getElementById("main").replaceWith(main); }
    const newWhen = doc.getElementById("when");
    if (newWhen && when) { when.replaceWith(newWhen); }
    body.dataset.at = t === null ? "" : String(t);
    if (slider && t !== null) { slider.value = String(Math.floor(t)); }
    window.history.replaceState(null, "", url);
    return true;
  }

  async function step(back) {
    // from the live view, forward starts at the beginning of history
    const start = back || !slider ? Date.now() / 1000 : parseFloat(slider.min) - 0.001;
    const at = currentAt() ?? start;
    const q = new URLSearchParams({at: String(at), n: "1"});
    if (back) { q.set("back", "1"); }
    const response = await fetch("/api/steps?" + q.toString());
    if (!response.ok) { return null; }
    const steps = (await response.json()).steps;
    if (!steps.length) { return null; }
    const next = steps[0];
    await show(next.t);
    const label = document.getElementById("when");
    if (label) { label.textContent = "as of " + fmt(next.t) + " (" + next.f58 + " " + next.name + ")"; }
    return next;
  }

  function stopPlay() {
    if (playing !== null) { clearTimeout(playing); playing = null; }
    const button = document.getElementById("play");
    if (button) { button.textContent = "▶ play"; }
  }

  async function playOnce() {
    const next = await step(false);
    if (next === null) { stopPlay(); return; }
    playing = setTimeout(playOnce, 700);
  }

  if (slider) {
    slider.addEventListener("input", function () {
      if (when) { when.textContent = "as of " + fmt(parseInt(slider.value, 10)); }
    });
    slider.addEventListener("change", function () {
      window.location.href = urlAt(parseInt(slider.value, 10)).toString();
    });
  }
  const play = document.getElementById("play");
  if (play) {
    play.addEventListener("click", function () {
      if (playing !== null) { stopPlay(); return; }
      play.textContent = "❚❚ pause";
      playing = setTimeout(playOnce, 0);
    });
  }
  const back = document.getElementById("step-back");
  if (back) { back.addEventListener("click", function () { stopPlay(); step(true); }); }
  const next = document.getElementById("step-next");
  if (next) { next.addEventListener("click", function () { stopPlay(); step(false); }); }
  if (atField && when && when.dataset.t) { atField.title = fmt(parseFloat(when.dataset.t)); }

  // Live pages (not in the past): every journal event reloads the view, at most
  // a few times a second.
  if (body.dataset.live === "1" && window.EventSource) {
    let pending = null;
    let events = 0;
    const jobMatch = window.location.pathname.match(/^\/jobs\/([^/]+)$/);
    const source = new EventSource("/api/events" + (jobMatch ? "?job=" + encodeURIComponent(decodeURIComponent(jobMatch[1])) : ""));
    source.addEventListener("open", function () {
      if (status) { status.textContent = "live"; status.dataset.state = "open"; }
    });
    source.addEventListener("job", function (message) {
      const item = JSON.parse(message.data);
      events += 1;
      if (status) {
        status.textContent = "live: " + item.f58 + " " + item.name;
        status.dataset.events = String(events);
      }
      if (pending === null) {
        pending = setTimeout(async function () {
          pending = null;
          await show(null);
          body.dataset.refreshed = String(events);
        }, 300);
      }
    });
    source.addEventListener("error", function () {
      if (status) { status.textContent = "live: reconnecting"; status.dataset.state = "error"; }
    });
  }
})();
