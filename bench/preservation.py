"""What must not be translated, kept: a preservation set translated with and without markers.

The set is built here, by rule: 33 Spanish sentences with one or two slots, each filled with
items of every kind `service.runtime.protect` keeps (URLs, e-mail addresses, numbers and
dates, placeholders of format strings, code in backticks, emoji and symbols), 10 fillings a
sentence: 330 segments; and the same sentences in HTML, a word of each wrapped in inline
markup (tags with attributes, nested tags, a line break, entity references) three ways: 99
segments. Every segment is translated by the shipped translator (greedy, in process) as it
is and with its items taken out and put back (the HTML ones as `text_format` HTML); an item
counts as kept when the translation holds it exactly, and an HTML translation counts as well
formed when its tags nest (`markup.well_formed`).

    python -m bench.preservation [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys

from service.runtime.markup import ENTITY, TAG, well_formed
from service.runtime.protect import mask

SENTENCES = [
    "Visita {} para más información.",
    "El archivo {} no se puede abrir.",
    "Escribe a {} si tienes dudas.",
    "Pulsa {} y luego guarda los cambios.",
    "El gato está durmiendo en el sofá {}.",
    "{} usuarios se conectaron ayer.",
    "La reunión es el {} en la sala grande.",
    "No se encontró {} en el servidor.",
    "Hola {}, ¿cómo estás?",
    "El precio es {} euros.",
    "Copia {} en la carpeta de descargas.",
    "Gracias por tu mensaje {}.",
    "Abre {} y busca la opción {}.",
    "El pedido {} llegará el {}.",
    "Tienes {} mensajes nuevos de {}.",
    "Ejecuta {} antes de reiniciar el equipo.",
    "La contraseña debe tener al menos {} caracteres.",
    "Se eliminaron {} archivos de {}.",
    "Mi perro se llama Toby {}.",
    "Comparte el enlace {} con tus amigos.",
    "El error {} apareció al guardar.",
    "Nos vemos mañana a las {}.",
    "Consulta la página {} del manual.",
    "Descarga la versión {} desde {}.",
    "¡Feliz cumpleaños {}!",
    "El tren sale del andén {} a las {}.",
    "Introduce {} en el campo de búsqueda.",
    "La temperatura bajó a {} grados.",
    "Envía el informe a {} antes del viernes.",
    "Me encanta esta canción {}.",
    "El valor de {} no es válido.",
    "Hay {} personas en la cola.",
    "Usa {} para separar las columnas.",
]
ITEMS = {
    "url": ["https://ejemplo.com/página", "www.attnserve.org/docs", "http://192.168.1.10:8080/a?b=c"],
    "email": ["ana.lopez@correo.es", "soporte@ejemplo.com"],
    "number": ["42", "3,5", "1.250", "12/05/2024", "10:30", "2024-03-01", "7"],
    "placeholder": ["%s", "%1$d", "{name}", "{0}", "$HOME", "${USER}"],
    "code": ["`git pull`", "`ls -la`", "`npm ci`"],
    "symbol": ["😺", "🚀", "👍🏽", "✔️", "❤️", "🇪🇸"],
}  # fmt: skip


def segments() -> list[tuple[str, list[str]]]:
    """(segment, its items) of the set: every sentence with 10 fillings, by rule."""
    pool = itertools.cycle([item for items in ITEMS.values() for item in items])
    built = []
    for sentence in SENTENCES:
        for _ in range(10):
            items = [next(pool) for _ in range(sentence.count("{}"))]
            built.append((sentence.format(*items), items))
    return built


WRAPS = [
    "<b>{}</b>",
    "<i>{}</i>",
    '<a href="https://ejemplo.com/a?x=1&amp;y=2" title="Más">{}</a>',
    '<span class="nota">{}</span>',
    "<b><i>{}</i></b>",
    "<em>{}</em> &amp;",
    "{}<br/>",
    "&laquo;{}&raquo;",
    "<code>{}</code>",
    "<strong>{}</strong>&nbsp;",
    '<a href="#top"><img src="x.png" alt="">{}</a>',
]
_MARKUP = re.compile(f"{TAG}|{ENTITY}")


def html_segments() -> list[tuple[str, list[str]]]:
    """(segment, its tags and entities) of the HTML part: each sentence (its slots filled)
    with a word wrapped three ways, by rule."""
    pool = itertools.cycle([item for items in ITEMS.values() for item in items])
    wraps = itertools.cycle(WRAPS)
    built = []
    for n, sentence in enumerate(SENTENCES):
        text = sentence.format(*[next(pool) for _ in range(sentence.count("{}"))])
        words = [w for w in text.split() if w.isalpha()]
        for k in range(3):
            word = words[(n + 2 * k) % len(words)]
            segment = re.sub(rf"\b{re.escape(word)}\b", next(wraps).format(word), text, count=1)
            built.append((segment, _MARKUP.findall(segment)))
    return built


def measure_html(translate, translate_html) -> dict:
    """Tags and entities kept, and translations well formed, as is and as HTML."""
    built = html_segments()
    texts = [text for text, _ in built]
    report: dict = {"segments": len(built), "items": sum(len(i) for _, i in built)}
    for name, outputs in (("as_is", translate(texts)), ("html", translate_html(texts))):
        kept = sum(
            output.count(item) >= items.count(item)
            for (_, items), output in zip(built, outputs, strict=True)
            for item in items
        )
        formed = sum(well_formed(output) for output in outputs)
        report[name] = {
            "kept": round(kept / report["items"], 4),
            "well_formed": round(formed / len(built), 4),
        }
        report[f"{name}_examples"] = outputs[:: len(texts) // 6]
    report["sources"] = texts[:: len(texts) // 6]
    return report


def measure(translate) -> dict:
    """Items kept exactly, with and without markers, over the set; by kind too."""
    built = segments()
    texts = [text for text, _ in built]
    masked = [mask(text) for text in texts]
    plain = translate(texts)
    marked = [
        m.restore(t) for m, t in zip(masked, translate([m.text for m in masked]), strict=True)
    ]
    of_item = {item: kind for kind, items in ITEMS.items() for item in items}
    report: dict = {"segments": len(built), "items": sum(len(i) for _, i in built)}
    for name, outputs in (("as_is", plain), ("markers", marked)):
        kept, by_kind = 0, {kind: [0, 0] for kind in ITEMS}
        for (_, items), output in zip(built, outputs, strict=True):
            for item in items:
                hit = output.count(item) >= 1
                kept += hit
                by_kind[of_item[item]][0] += hit
                by_kind[of_item[item]][1] += 1
        report[name] = {
            "kept": round(kept / report["items"], 4),
            "by_kind": {k: round(a / b, 4) for k, (a, b) in by_kind.items()},
        }
    report["examples"] = [
        {"source": t, "as_is": p, "markers": m}
        for t, p, m in list(zip(texts, plain, marked, strict=True))[:: len(texts) // 8]
    ]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from models.checkpoint import load_checkpoint
    from models.reference import TorchEngine
    from models.shipped import SHIPPED_TRANSLATOR
    from service.runtime.decoding import DecodingOptions
    from service.runtime.translation import translate_documents, translate_texts

    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    options = DecodingOptions(max_length=128)

    def translate(texts: list[str]) -> list[str]:
        nbest = translate_texts(TorchEngine(model), tokenizer, texts, options, 512, 64)
        return [tokenizer.decode(n[0].tokens) for n in nbest]

    def translate_html(texts: list[str]) -> list[str]:
        engine = TorchEngine(model)
        return translate_documents(
            engine, tokenizer, texts, options, 512, "none", 64, text_format="html"
        )

    report = measure(translate)
    report["html"] = measure_html(translate, translate_html)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    print(f"{report['segments']} segments, {report['items']} items")
    for name in ("as_is", "markers"):
        kinds = ", ".join(f"{k} {v:.1%}" for k, v in report[name]["by_kind"].items())
        print(f"{name}: {report[name]['kept']:.1%} kept ({kinds})")
    marked = report["html"]
    print(f"HTML: {marked['segments']} segments, {marked['items']} tags and entities")
    for name in ("as_is", "html"):
        kept, formed = marked[name]["kept"], marked[name]["well_formed"]
        print(f"{name}: {kept:.1%} kept, {formed:.1%} well formed")
    for example in report["examples"]:
        print(f"  {example['source']}")
        print(f"    as is:   {example['as_is']}\n    markers: {example['markers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
