// gpufleet dashboard: signs in with a pasted bearer token, then polls the admin API and draws
// the fleet (nodes x GPUs, MIG slices at their memory-slice positions, coloured by job or
// queue, with power) and the jobs with the reasons they wait. Plain DOM code, no libraries;
// every text from the API goes in through textContent.
"use strict";

const API = "/api/v1";
const POLL_MS = 3000;
const TOKEN_KEY = "gpufleet-token";
const MEMORY_SLICES = 8;
let timer = null;
let colourBy = "job";

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// A stable, readable colour per key (job or queue name).
function colour(key) {
  let h = 0;
  for (const ch of key) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${h % 360}, 55%, 45%)`;
}

function holderKey(holder) {
  if (!holder) return null;
  if (colourBy === "queue") return holder.queue || "(no queue)";
  return holder.job ? `${holder.job.namespace}/${holder.job.name}` : holder.pod;
}

function describe(holder) {
  const job = holder.job ? `${holder.job.kind} ${holder.job.namespace}/${holder.job.name}` : "no job";
  const cap = holder.powerCapW ? `, cap ${holder.powerCapW} W` : "";
  return `${holder.pod} (${job}, queue ${holder.queue || "-"}, priority ${holder.priority}${cap})`;
}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(API + path, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const problem = await response.json();
      detail = problem.detail || problem.title || detail;
    } catch (_) { /* not a problem document */ }
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

async function all(path, key) {
  const items = [];
  let next = null;
  let first = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(path + (next ? `${sep}continue=${encodeURIComponent(next)}` : ""));
    first = first || page;
    items.push(...page[key]);
    next = page.metadata.continue;
  } while (next);
  return { first, items };
}

function drawGpu(gpu, seen) {
  const cell = el("div", "gpu");
  cell.dataset.gpu = gpu.index;
  cell.appendChild(el("span", "idx", gpu.index));
  cell.appendChild(el("span", "watts", `${Math.round(gpu.powerW)}W`));
  if (!gpu.migEnabled) {
    if (gpu.holder) {
      const key = holderKey(gpu.holder);
      cell.classList.add("held");
      cell.style.background = colour(key);
      cell.title = `GPU ${gpu.index}: ${describe(gpu.holder)}`;
      cell.dataset.holder = key;
      seen.add(key);
    } else {
      cell.title = `GPU ${gpu.index}: free`;
    }
    return cell;
  }
  cell.classList.add("mig");
  cell.title = `GPU ${gpu.index}: MIG`;
  for (const s of gpu.slices) {
    const part = el("div", "slice");
    part.style.left = `${(100 * s.start) / MEMORY_SLICES}%`;
    part.style.width = `${(100 * s.memorySlices) / MEMORY_SLICES}%`;
    part.dataset.profile = s.profile;
    part.dataset.start = s.start;
    if (s.holder) {
      const key = holderKey(s.holder);
      part.classList.add("held");
      part.style.background = colour(key);
      part.dataset.holder = key;
      part.dataset.job = s.holder.job ? `${s.holder.job.namespace}/${s.holder.job.name}` : "";
      part.title = `${s.profile}@${s.start}: ${describe(s.holder)}`;
      seen.add(key);
    } else {
      part.title = `${s.profile}@${s.start}: free`;
    }
    cell.appendChild(part);
  }
  return cell;
}

function drawFleet(fleet, nodes) {
  const seen = new Set();
  const grid = $("fleet");
  const cards = [];
  for (const node of nodes) {
    const card = el("div", "node");
    card.dataset.node = node.name;
    if (node.unschedulable) card.classList.add("unschedulable");
    if (!node.ready) card.classList.add("not-ready");
    const head = el("div", "node-head");
    head.appendChild(el("span", "node-name", node.name));
    head.appendChild(el("span", "node-type", node.gpuType));
    if (node.unschedulable) head.appendChild(el("span", "badge", "cordoned"));
    if (!node.ready) head.appendChild(el("span", "badge", "not ready"));
    if (node.migConfig && node.migConfigState !== "success") {
      head.appendChild(el("span", "badge", `MIG ${node.migConfig}: ${node.migConfigState || "?"}`));
    }
    head.appendChild(el("span", "node-power", `${Math.round(node.powerW)} W`));
    card.appendChild(head);
    const gpus = el("div", "gpus");
    for (const gpu of node.gpus) gpus.appendChild(drawGpu(gpu, seen));
    card.appendChild(gpus);
    cards.push(card);
  }
  grid.replaceChildren(...cards);

  $("capacity").replaceChildren(
    ...fleet.capacity.map((c) =>
      el("span", "cap", `${c.gpuType}${c.migProfile ? " " + c.migProfile : ""}: ` +
        `${c.allocated}/${c.allocatable}` +
        (c.outsideQueues ? ` (${c.outsideQueues} outside queues)` : ""))));
  $("legend").replaceChildren(
    ...[...seen].sort().map((key) => {
      const item = el("span", "legend-item");
      const swatch = el("span", "swatch");
      swatch.style.background = colour(key);
      item.append(swatch, key);
      return item;
    }));
  const reconfiguring = fleet.pendingMigReconfigurations.length;
  $("summary").textContent = `${nodes.length} nodes · ${Math.round(fleet.powerW / 1000 * 10) / 10} kW` +
    ` · ${fleet.pendingGangs} gang${fleet.pendingGangs === 1 ? "" : "s"} waiting` +
    (reconfiguring ? ` · ${reconfiguring} MIG reconfigurations` : "");
}

function drawJobs(jobs) {
  const rows = jobs.map((job) => {
    const tr = el("tr");
    tr.dataset.job = `${job.namespace}/${job.kind}/${job.name}`;
    const nodes = [...new Set(job.placement.map((r) => r.node))].join(", ");
    const reason = el("td", "reason");
    if (job.waiting) {
      reason.append(el("span", "reason-code", job.waiting.reason), ": ", job.waiting.message);
    }
    const gpuHours = job.gpuSeconds != null ? (job.gpuSeconds / 3600).toFixed(2) : "";
    const kwh = job.estimatedEnergyJoules != null ? (job.estimatedEnergyJoules / 3.6e6).toFixed(3) : "";
    tr.append(
      el("td", null, job.namespace), el("td", null, job.kind), el("td", "name", job.name),
      el("td", null, job.queue), el("td", "phase", job.phase || ""),
      el("td", null, job.gpuType || ""), el("td", null, nodes), reason,
      el("td", null, job.queuePosition || ""), el("td", null, gpuHours), el("td", null, kwh));
    return tr;
  });
  $("jobs").tBodies[0].replaceChildren(...rows);
}

async function refresh() {
  try {
    const [fleet, jobs] = await Promise.all([all("/fleet?limit=1000", "nodes"),
      all("/jobs?limit=1000", "items").catch((e) => {
        if (e.status === 403) return { items: [] }; // may see the fleet but no job
        throw e;
      })]);
    drawFleet(fleet.first, fleet.items);
    drawJobs(jobs.items);
    $("error").textContent = "";
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (!document.body.dataset.rendered) {
      document.body.dataset.rendered = String(performance.now());
    }
    return true;
  } catch (e) {
    if (e.status === 401) {
      signOut(`signed out: ${e.message}`);
      return false;
    }
    $("error").textContent = `could not refresh: ${e.message}`;
    return false;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    await refresh();
    if (sessionStorage.getItem(TOKEN_KEY)) schedule();
  }, POLL_MS);
}

async function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await api("/fleet?limit=1");
  } catch (e) {
    signOut(`sign-in failed: ${e.message}`);
    return;
  }
  $("signin").hidden = true;
  $("main").hidden = false;
  $("sign-out").hidden = false;
  await refresh();
  schedule();
}

function signOut(message) {
  clearTimeout(timer);
  sessionStorage.removeItem(TOKEN_KEY);
  $("main").hidden = true;
  $("sign-out").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
}

$("signin-button").addEventListener("click", () => {
  const token = $("token").value.trim();
  if (!token) {
    $("signin-error").textContent = "paste a token first";
    return;
  }
  $("token").value = "";
  signIn(token);
});
$("sign-out").addEventListener("click", () => signOut(""));
$("colour-by").addEventListener("change", (e) => {
  colourBy = e.target.value;
  refresh();
});

if (sessionStorage.getItem(TOKEN_KEY)) signIn(sessionStorage.getItem(TOKEN_KEY));
