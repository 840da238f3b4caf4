"""Sentence pairs from gettext catalogs: cleaning, what is dropped, the held-out test part
without leaks. The catalogs are written here in the compiled .mo format."""

from __future__ import annotations

import struct
from pathlib import Path

from models.catalogs import LOCALE_DIRS, build_pairs, catalog_entries, clean, why_dropped


def write_mo(path: Path, entries: dict[str, str]) -> None:
    """A little-endian GNU .mo file of `entries` (msgid -> msgstr), the header included."""
    entries = {"": "Content-Type: text/plain; charset=UTF-8\n", **entries}
    keys = sorted(entries)
    ids = [k.encode() for k in keys]
    strs = [entries[k].encode() for k in keys]
    start = 7 * 4 + 16 * len(keys)
    offsets, data = [], b""
    for text in ids + strs:
        offsets.append((len(text), start + len(data)))
        data += text + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0)
    table = b"".join(struct.pack("<2I", *o) for o in offsets)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + table + data)


def _package(root: Path, name: str, entries: dict[str, str]) -> Path:
    tree = root / name
    write_mo(tree / LOCALE_DIRS[0] / f"{name}.mo", entries)
    return tree


def test_entries_lose_their_context_and_plural_forms_are_skipped(tmp_path):
    path = tmp_path / "x.mo"
    write_mo(path, {"menu\x04Open the file": "Abrir el archivo", "Close window": "Cerrar"})
    assert catalog_entries(path) == [
        ("Close window", "Cerrar"),
        ("Open the file", "Abrir el archivo"),
    ]


def test_cleaning_removes_accelerators_markup_and_entities():
    assert clean("_Guardar  como…") == "Guardar como…"
    assert clean("&Open the <b>new</b> file") == "Open the new file"
    assert clean("Marcar como s_pam") == "Marcar como spam"
    assert clean("Save &amp; Close") == "Save & Close"
    assert clean("a_long_name stays") == "a_long_name stays"  # not an accelerator


def test_placeholders_untranslated_short_and_paths_are_dropped():
    assert why_dropped("Abrir %s", "Open %s", "Open %s") == "placeholder"
    assert why_dropped("Hola {name}", "Hello {name}", "Hello {name}") == "placeholder"
    assert why_dropped("Copiar %1 archivos", "Copy %1 files", "Copy %1 files") == "placeholder"
    assert why_dropped("Same text", "Same text", "Same text") == "untranslated"
    assert why_dropped("Abrir", "Open", "Open") == "too short"
    assert why_dropped("Ver http://x.org ahora", "See http://x.org now", "See now") == "not prose"
    assert why_dropped("Guardar el archivo", "Save the file", "Save the file") is None


def test_held_out_packages_make_a_test_part_without_leaks(tmp_path):
    trees = {
        "editor": _package(
            tmp_path,
            "editor",
            {
                "_Save the file": "_Guardar el archivo",
                "Open a new window": "Abrir una ventana nueva",
                "Print %d pages": "Imprimir %d páginas",
            },
        ),
        "chat": _package(
            tmp_path,
            "chat",
            {
                "Open a new window": "Abrir otra ventana",  # the English side occurs in training
                "Join the channel": "Unirse al canal",
                "Leave the channel": "Salir del canal",
            },
        ),
    }
    train, modern, stats = build_pairs(trees, {"editor": "train", "chat": "modern"})
    assert sorted(train) == [
        ("Abrir una ventana nueva", "Open a new window"),
        ("Guardar el archivo", "Save the file"),
    ]
    assert sorted(modern) == [
        ("Salir del canal", "Leave the channel"),
        ("Unirse al canal", "Join the channel"),
    ]
    assert stats.entries == {"chat": 3, "editor": 3} and stats.dropped == {"placeholder": 1}
    assert stats.kept == {"chat": 3, "editor": 2}


def test_the_everyday_test_set_is_well_formed():
    from helpers import ROOT

    lines = (ROOT / "models" / "testsets" / "everyday.tsv").read_text(encoding="utf-8")
    pairs = [line.split("\t") for line in lines.splitlines() if not line.startswith("#")]
    assert len(pairs) >= 100 and all(len(p) == 2 and p[0] and p[1] for p in pairs)
    assert len({p[0] for p in pairs}) == len(pairs)  # no source twice
