// The page: the /v1 JSON API of this server (protobuf's JSON mapping), and LibreTranslate's
// /translate_file for a document translated as a file. Its calls name paths relative to the
// page (../v1/...), so they reach the server under any root path a proxy serves it at.
"use strict";

const $ = (id) => document.getElementById(id);
const languagesOf = {};  // a translator option's value -> its languages ({source, target})

// an answer's JSON; an error naming what the server said (the contract's {error: {status,
// message}}, LibreTranslate's {error}), or its HTTP status where the body is not JSON
async function answered(answer) {
  const body = await answer.text();
  let json = null;
  try { json = JSON.parse(body); } catch { json = null; }
  if (answer.ok && json !== null) return json;
  const error = json && json.error;
  if (error && error.message) throw new Error(`${error.status}: ${error.message}`);
  if (typeof error === "string") throw new Error(error);
  throw new Error(`${answer.status} ${answer.statusText}`.trim());
}

// the bearer token a server with tokens asks for, kept for this tab's session
function authorized(headers = {}) {
  const token = $("token").value.trim();
  return token ? { ...headers, authorization: `Bearer ${token}` } : headers;
}

async function call(path, body) {
  const init = { method: "POST" };
  if (body instanceof FormData) { init.body = body; init.headers = authorized(); }
  else { init.body = JSON.stringify(body); init.headers = authorized({ "content-type": "application/json" }); }
  return answered(await fetch(path, init));
}

function shown(element, text) { element.textContent = text; element.hidden = !text; }

// each button's latest call: the answer of a call a later click replaced is dropped, not
// shown beside (or after) the later one's
const latest = {};
function begun(button) {
  const number = (latest[button] || 0) + 1;
  latest[button] = number;
  return () => latest[button] === number;
}

// the server's health, asked again every few seconds: a page opened while the server warms
// up, or left open while it drains or stops, says what it is now
const HEALTH_EVERY_MS = 5000;
async function showHealth() {
  const health = await fetch("../v1/health").then((r) => r.json()).catch(() => ({ status: "unreachable" }));
  // written when it changes alone: a screen reader says the status's changes, not each poll
  if ($("health").textContent !== health.status) $("health").textContent = health.status;
}

// the models served, listed again when the token changes (a server with tokens lists them
// to a known one); where they cannot be listed (a server refusing, a token fetch cannot
// send) each section says why its list is empty, and calls go to the server's defaults
async function loadModels() {
  const current = begun("models");
  let models = [], why = "";
  try {
    ({ models } = await answered(await fetch("../v1/models", { headers: authorized() })));
  } catch (error) {
    why = `the models could not be listed: ${error.message}`;
  }
  if (!current()) return;
  for (const id of ["translate-error", "caption-error"]) shown($(id), why);
  for (const id of ["translator", "captioner"]) $(id).replaceChildren();
  for (const model of models) {
    const select = model.service.endsWith("TranslationService") ? $("translator") : $("captioner");
    const option = new Option(`${model.name} ${model.version}` + (model.languages.source.length ? ` (${model.languages.source.join(",")} → ${model.languages.target.join(",")})` : ""), JSON.stringify([model.name, model.version]));
    option.selected = model.default;
    select.add(option);
    if (select === $("translator")) languagesOf[option.value] = model.languages;
  }
  chooseLanguages();
}

// the chosen translator's languages: a source detected where it reads several (its token
// says which), English written where it writes several and English is one
function chooseLanguages() {
  const { source = [], target = [] } = languagesOf[$("translator").value] || {};
  const from = $("source-language"), to = $("target-language");
  from.replaceChildren();
  to.replaceChildren();
  if (source.length !== 1) from.add(new Option(source.length ? "detect" : "the model's", ""));
  for (const code of source) from.add(new Option(code, code));
  if (!target.length) to.add(new Option("the model's", ""));
  for (const code of target) to.add(new Option(code, code));
  const english = target.find((code) => /^en(g?_|$|-)/i.test(code));  // en, eng_Latn, en_XX
  if (english) to.value = english;
  languageOf($("source"), from.value);
}

// the BCP 47 tag of a model's language code (es, es_XX, te_IN, spa_Latn), or "" for none
function bcp47(code) {
  return (code || "").split("_").filter((part) => part !== "XX").join("-");
}

// an element's text said in a language: screen readers read it with that language's voice
function languageOf(element, code) {
  const tag = bcp47(code);
  if (tag) element.lang = tag;
  else element.removeAttribute("lang");
}

// the decoding options given: a field left empty is the server's default
function options(beam, hypotheses, maxLength) {
  const chosen = {};
  if (beam) chosen.beamSize = Number(beam);
  if (hypotheses) chosen.numHypotheses = Number(hypotheses);
  if (maxLength) chosen.maxLength = Number(maxLength);
  return chosen;
}

// a line's terms cut at its first "=": a target may hold one too (a formula, a URL's query)
function glossary() {
  const terms = [];
  for (const line of $("glossary").value.split("\n")) {
    const equals = line.indexOf("="), source = line.slice(0, equals).trim();
    if (equals > 0 && source) terms.push({ source, target: line.slice(equals + 1).trim() });
  }
  return terms;
}

// text read by screen readers and not drawn (a table's caption, a cell's weight)
function unseen(text) {
  const span = document.createElement("span");
  span.className = "visually-hidden";
  span.textContent = text;
  return span;
}

// a header cell of the table: a token, its column's (scope col) or its row's (scope row)
function headerCell(text, scope) {
  const th = document.createElement("th");
  th.scope = scope;
  th.textContent = text;
  return th;
}

// a sentence's alignment as a table of shaded cells: a row per target token; each cell's
// weight is its shade, its title, and a text a screen reader reads with the cell's headers
function alignmentTable(alignment, number) {
  const { sourceTokens, targetTokens, weights } = alignment;
  const table = document.createElement("table");
  table.createCaption().appendChild(unseen(`Sentence ${number}'s alignment: a row per token translated, its weight on each source token`));
  const head = table.createTHead().insertRow();
  const corner = document.createElement("th");
  corner.appendChild(unseen("translated token"));
  head.appendChild(corner);
  for (const token of sourceTokens) head.appendChild(headerCell(token, "col"));
  const body = table.createTBody();
  targetTokens.forEach((token, i) => {
    const row = body.insertRow();
    row.appendChild(headerCell(token, "row"));
    sourceTokens.forEach((_, j) => {
      const w = weights[i * sourceTokens.length + j] || 0;
      const cell = row.insertCell();
      cell.style.background = `rgba(36, 87, 197, ${w.toFixed(3)})`;
      cell.title = w.toFixed(3);
      cell.appendChild(unseen(w.toFixed(3)));
    });
  });
  return table;
}

async function translate() {
  const current = begun("translate");
  shown($("translate-error"), "");
  $("download").hidden = true;
  $("translated-by").textContent = "";
  $("translation").textContent = "…";
  $("translation").setAttribute("aria-busy", "true");  // said once the answer is in
  $("alignments").replaceChildren();
  const [model, version] = JSON.parse($("translator").value || '["", ""]');
  const request = {
    model, version, texts: [$("source").value],
    sourceLanguage: $("source-language").value, targetLanguage: $("target-language").value,
    textFormat: $("format").value, sentenceSplitting: $("splitting").value, glossary: glossary(),
    options: { ...options($("beam").value, $("hypotheses").value, $("max-length").value), returnAlignment: true },
  };
  try {
    const response = await call("../v1/translate", request);
    if (!current()) return;
    const translation = response.translations[0];
    const languages = response.sourceLanguage ? `: ${response.sourceLanguage} → ${response.targetLanguage}` : "";
    $("translated-by").textContent = `${response.model} ${response.version}${languages}`;
    languageOf($("translation"), response.targetLanguage || request.targetLanguage);
    $("translation").textContent = translation.hypotheses.map((h, i) => (translation.hypotheses.length > 1 ? `${i + 1}. ` : "") + h.text).join("\n");
    // a text of several sentences: each sentence's alignment; of one: its best hypothesis'
    const alignments = (translation.sentences || []).map((s) => s.alignment).filter(Boolean);
    if (!alignments.length && translation.hypotheses[0].alignment) alignments.push(translation.hypotheses[0].alignment);
    alignments.forEach((alignment, i) => {
      const box = document.createElement("div");
      box.className = "alignment";
      box.appendChild(alignmentTable(alignment, i + 1));
      $("alignments").appendChild(box);
    });
  } catch (error) {
    if (current()) { $("translation").textContent = ""; shown($("translate-error"), error.message); }
  } finally {
    if (current()) $("translation").removeAttribute("aria-busy");
  }
}

async function openDocument() {
  $("download").hidden = true;
  const file = $("document").files[0];
  if (!file || !/\.(txt|html?)$/i.test(file.name)) return;
  $("source").value = await file.text();
  $("format").value = /\.html?$/i.test(file.name) ? "TEXT_FORMAT_HTML" : "TEXT_FORMAT_PLAIN";
  $("splitting").value = "SENTENCE_SPLITTING_SENTENCES";
}

// the chosen document through LibreTranslate's /translate_file, in the languages chosen (the
// model serving that pair translates it), given back as a link to the translated file
async function translateFile() {
  shown($("translate-error"), "");
  const link = $("download");
  link.hidden = true;
  const file = $("document").files[0];
  if (!file) { shown($("translate-error"), "choose a document first"); return; }
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source-language").value || "auto");
  form.append("target", $("target-language").value);
  $("translated-by").textContent = `${file.name}: …`;
  try {
    const json = await answered(await fetch("../translate_file", { method: "POST", body: form, headers: authorized() }));
    link.href = json.translatedFileUrl;
    link.download = file.name;
    link.textContent = `${file.name}, translated`;
    link.hidden = false;
    $("translated-by").textContent = "the model serving the pair translated it";
  } catch (error) { $("translated-by").textContent = ""; shown($("translate-error"), error.message); }
}

// each word's attention grid drawn over the image, as the README's figure
function drawAttention(image, maps) {
  const figures = [];
  for (const token of maps.tokens) {
    const canvas = document.createElement("canvas");
    const scale = 160 / Math.max(image.naturalWidth, image.naturalHeight);
    canvas.width = Math.round(image.naturalWidth * scale);
    canvas.height = Math.round(image.naturalHeight * scale);
    // the drawing's text alternative: the word (its token without SentencePiece's marks)
    const word = token.token.replace(/▁/g, " ").replace("</s>", "").trim();
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", word ? `where "${word}" looked in the image` : "where the caption's end looked in the image");
    const context = canvas.getContext("2d");
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    const peak = Math.max(...token.weights);
    const cellW = canvas.width / maps.gridWidth, cellH = canvas.height / maps.gridHeight;
    token.weights.forEach((w, k) => {
      const row = Math.floor(k / maps.gridWidth), col = k % maps.gridWidth;
      context.fillStyle = `rgba(0, 0, 0, ${(0.75 * (1 - w / peak)).toFixed(3)})`;
      context.fillRect(col * cellW, row * cellH, cellW + 0.5, cellH + 0.5);
    });
    const figure = document.createElement("figure");
    const caption = document.createElement("figcaption");
    caption.textContent = token.token;
    figure.append(canvas, caption);
    figures.push(figure);
  }
  $("attention").replaceChildren(...figures);
}

async function caption() {
  const current = begun("caption");
  shown($("caption-error"), "");
  $("caption-text").textContent = "";  // the last image's, not this one's
  $("attention").replaceChildren();
  const file = $("image").files[0];
  if (!file) { shown($("caption-error"), "choose an image first"); return; }
  const [model, version] = JSON.parse($("captioner").value || '["", ""]');
  const form = new FormData();
  form.append("images", file);
  form.append("model", model);
  form.append("version", version);
  form.append("returnAttention", "true");
  form.append("options", JSON.stringify(options($("caption-beam").value)));
  $("caption-text").textContent = "…";
  $("caption-text").setAttribute("aria-busy", "true");
  try {
    const response = await call("../v1/caption", form);
    if (!current()) return;
    const best = response.captions[0].hypotheses[0];
    $("caption-text").textContent = best.text;
    // the image read through an object URL, released once read: a tab left open would
    // otherwise hold every image it captioned
    const image = new Image();
    const release = () => URL.revokeObjectURL(image.src);
    image.onload = () => { release(); if (current()) drawAttention(image, best.attention); };
    image.onerror = release;
    image.src = URL.createObjectURL(file);
  } catch (error) {
    if (current()) { $("caption-text").textContent = ""; shown($("caption-error"), error.message); }
  } finally {
    if (current()) $("caption-text").removeAttribute("aria-busy");
  }
}

$("translate-button").addEventListener("click", translate);
$("caption-button").addEventListener("click", caption);
$("document").addEventListener("change", openDocument);
$("file-button").addEventListener("click", translateFile);
$("translator").addEventListener("change", () => { $("download").hidden = true; chooseLanguages(); });
$("source-language").addEventListener("change", () => languageOf($("source"), $("source-language").value));
$("token").value = sessionStorage.getItem("attnserve-token") || "";
$("token").addEventListener("change", () => { sessionStorage.setItem("attnserve-token", $("token").value.trim()); loadModels(); });
showHealth();
setInterval(showHealth, HEALTH_EVERY_MS);
loadModels();
