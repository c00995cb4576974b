// The topology page's action buttons: ask (confirm, or a wait time for kill and rebalance), then POST to the
// REST API (/api/v1/topology/ID/ACTION[/WAIT]) and reload the page to show what nimbus did.
"use strict";

function showResult(ok, text) {
  const line = document.getElementById("action-result");
  line.className = ok ? "ok" : "problem";
  line.textContent = text;  // text, never HTML: messages quote user input
}

async function runAction(button) {
  const { action, topologyId, topologyName, waitDefault } = button.dataset;
  const verb = action.charAt(0).toUpperCase() + action.slice(1);
  let path = `/api/v1/topology/${encodeURIComponent(topologyId)}/${action}`;
  let body = null;
  if (action === "kill" || action === "rebalance") {
    const wait = window.prompt(`${verb} topology "${topologyName}"? Seconds nimbus waits first:`, waitDefault);
    if (wait === null) return;
    path += `/${encodeURIComponent(wait.trim())}`;
    if (action === "rebalance") {
      const workers = window.prompt("Number of workers (empty keeps the number it has):", "");
      if (workers === null) return;
      if (workers.trim()) body = JSON.stringify({ rebalanceOptions: { numWorkers: workers.trim() } });
    }
  } else if (!window.confirm(`${verb} topology "${topologyName}"?`)) {
    return;
  }
  button.disabled = true;
  try {
    const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const reply = await response.json();
    if (!response.ok) {
      showResult(false, `${verb} refused: ${reply.errorMessage}`);
      button.disabled = false;
      return;
    }
    showResult(true, `${verb}: ${reply.status}`);
    if (action === "kill") window.location.assign("/");
    else window.location.reload();
  } catch (error) {
    showResult(false, `${verb} failed: ${error}`);
    button.disabled = false;
  }
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button) runAction(button);
});
