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

async function main() {
  const document_ = await fetch("../openapi.json").then((r) => r.json());
  const schemas = document_.components.schemas;
  const root = document.getElementById("operations");
  for (const [path, verbs] of Object.entries(document_.paths)) {
    for (const [verb, operation] of Object.entries(verbs)) {
      const section = document.createElement("section");
      const title = document.createElement("h2");
      title.textContent = `${verb.toUpperCase()} ${path}`;
      const summary = document.createElement("p");
      summary.textContent = operation.summary;
      section.append(title, summary);
      let body = null;
      const json = operation.requestBody && operation.requestBody.content["application/json"];
      if (json) {
        body = document.createElement("textarea");
        body.rows = 6;
        body.value = JSON.stringify(json.example ?? example(json.schema, schemas), null, 2);
        section.appendChild(body);
      }
      const button = document.createElement("button");
      button.textContent = "Send";
      const output = document.createElement("pre");
      output.className = "output";
      button.addEventListener("click", async () => {
        const init = { method: verb.toUpperCase(), headers: authorized() };
        if (body) { init.body = body.value; init.headers = authorized({ "content-type": "application/json" }); }
        try {  // a call the browser cannot make (a token it cannot send, a server gone)
          const answer = await fetch(`..${path}`, init);
          output.textContent = `${answer.status}\n${await answer.text()}`;
        } catch (error) { output.textContent = `not sent: ${error.message}`; }
      });
      section.append(button, output);
      root.appendChild(section);
    }
  }
}
main();
