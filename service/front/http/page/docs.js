// The API's document (/openapi.json) as forms: each operation, its body's schema as an
// example, and a button that sends it. The document and the calls are read relative to this
// page (../openapi.json), under any root path a proxy serves the server at.
"use strict";

function example(schema, schemas, depth = 0) {
  if (schema.$ref) return example(schemas[schema.$ref.split("/").pop()], schemas, depth);
  if (depth > 2) return undefined;
  if (schema.type === "array") { const item = example(schema.items, schemas, depth + 1); return item === undefined ? [] : [item]; }
  if (schema.type === "object") {
    const value = {};
    for (const [name, field] of Object.entries(schema.properties || {})) {
      const v = example(field, schemas, depth + 1);
      if (v !== undefined && !(Array.isArray(v) && v.length === 0)) value[name] = v;
    }
    return value;
  }
  if (schema.enum) return schema.enum[0];
  return { string: "", number: 0, integer: 0, boolean: false }[schema.type];
}

// the bearer token a server with tokens asks for, kept for this tab's session (the page's too)
const token = document.getElementById("token");
token.value = sessionStorage.getItem("attnserve-token") || "";
token.addEventListener("change", () => sessionStorage.setItem("attnserve-token", token.value.trim()));

function authorized(headers = {}) {
  const value = token.value.trim();
  return value ? { ...headers, authorization: `Bearer ${value}` } : headers;
}

// a field of the form: a file picker for a binary string, else a text box
function field(name, schema, required) {
  const label = document.createElement("label");
  label.textContent = required ? `${name} (required)` : name;
  const input = document.createElement("input");
  input.name = name;
  if (schema.format === "binary") input.type = "file";
  else if (schema.default !== undefined) input.value = schema.default;
  label.appendChild(input);
  return label;
}

// the operation's fields beside its JSON body: a box per path parameter ({name} of
// /download_file/{name}), and the fields of a body sent only as a multipart form (a file
// for /translate_file)
function fields(operation, schemas) {
  const row = document.createElement("div");
  row.className = "row";
  for (const parameter of operation.parameters || []) {
    if (parameter.in === "path") row.appendChild(field(parameter.name, parameter.schema, true));
  }
  const content = operation.requestBody ? operation.requestBody.content : {};
  const multipart = !content["application/json"] && content["multipart/form-data"];
  let form = null;
  if (multipart) {
    form = multipart.schema.$ref ? schemas[multipart.schema.$ref.split("/").pop()] : multipart.schema;
    for (const [name, schema] of Object.entries(form.properties || {})) {
      row.appendChild(field(name, schema, (form.required || []).includes(name)));
    }
  }
  return { row, form };
}

// the path with each {parameter} filled from its box, relative to this page
function filled(path, row) {
  const value = (name) => encodeURIComponent(row.querySelector(`input[name="${name}"]`).value);
  return ".." + path.replace(/\{([^}]+)\}/g, (_, name) => value(name));
}

// the form's filled fields as a multipart body: each chosen file, each non-empty text
function multipartBody(form, row) {
  const body = new FormData();
  for (const name of Object.keys(form.properties || {})) {
    const input = row.querySelector(`input[name="${name}"]`);
    if (input.type === "file") { if (input.files[0]) body.append(name, input.files[0]); }
    else if (input.value !== "") body.append(name, input.value);
  }
  return body;
}

// the name a file answered is saved under: its Content-Disposition's filename*, percent-
// decoded (RFC 6266: a name not plain ASCII), else its filename
function savedName(disposition) {
  const encoded = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  if (encoded) return decodeURIComponent(encoded[1]);
  return (/filename="?([^";]+)/i.exec(disposition) || [])[1] || "file";
}

// an answer as text, or, where it is a file, its size and a link that saves it
async function shown(answer, output) {
  const type = answer.headers.get("content-type") || "";
  if (/^(text\/|application\/json)/.test(type)) {
    output.textContent = `${answer.status}\n${await answer.text()}`;
    return;
  }
  const file = await answer.blob();
  output.textContent = `${answer.status}\n${type}, ${file.size} bytes `;
  const link = document.createElement("a");
  link.href = URL.createObjectURL(file);
  link.download = savedName(answer.headers.get("content-disposition") || "");
  link.textContent = "save";
  output.appendChild(link);
}

// the API's document (served without a token), or an error that says why there are no forms
async function apiDocument(root) {
  try {
    const answer = await fetch("../openapi.json");
    if (!answer.ok) throw new Error(`${answer.status} ${answer.statusText}`.trim());
    return await answer.json();
  } catch (error) {
    const said = document.createElement("p");
    said.className = "error";
    said.setAttribute("role", "alert");
    said.textContent = `The API's document (openapi.json) could not be read: ${error.message}`;
    root.replaceChildren(said);
    return null;
  }
}

async function main() {
  const root = document.getElementById("operations");
  const document_ = await apiDocument(root);
  if (!document_) return;
  const schemas = document_.components.schemas;
  for (const [path, verbs] of Object.entries(document_.paths)) {
    for (const [verb, operation] of Object.entries(verbs)) {
      const section = document.createElement("section");
      const title = document.createElement("h2");
      title.textContent = `${verb.toUpperCase()} ${path}`;
      const summary = document.createElement("p");
      summary.textContent = operation.summary;
      section.append(title, summary);
      const { row, form } = fields(operation, schemas);
      if (row.children.length) section.appendChild(row);
      let body = null;
      const json = operation.requestBody && operation.requestBody.content["application/json"];
      if (json) {
        body = document.createElement("textarea");
        body.rows = 6;
        body.setAttribute("aria-label", `${title.textContent}: JSON body`);  // drawn under its title
        body.value = JSON.stringify(json.example ?? example(json.schema, schemas), null, 2);
        section.appendChild(body);
      }
      const button = document.createElement("button");
      button.textContent = "Send";
      button.setAttribute("aria-label", `Send ${title.textContent}`);  // one of many Sends
      const output = document.createElement("pre");
      output.className = "output";
      output.setAttribute("aria-live", "polite");  // the answer said once it is in
      button.addEventListener("click", async () => {
        const init = { method: verb.toUpperCase(), headers: authorized() };
        if (body) { init.body = body.value; init.headers = authorized({ "content-type": "application/json" }); }
        if (form) init.body = multipartBody(form, row);  // its boundary set by fetch
        output.setAttribute("aria-busy", "true");
        try {  // a call the browser cannot make (a token it cannot send, a server gone)
          await shown(await fetch(filled(path, row), init), output);
        } catch (error) { output.textContent = `not sent: ${error.message}`; }
        output.removeAttribute("aria-busy");
      });
      section.append(button, output);
      root.appendChild(section);
    }
  }
}
main();
