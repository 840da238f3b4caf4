"""A .docx's content controls bound to custom XML (w:sdtPr/w:dataBinding: a store's
item, by its id, and an XPath in it): Word fills such a control from its node each time it
opens the file, so a translation written into the control alone gives way to the source's
text again. Where the control is plain text and its XPath leads safely to one node of text
(a path of named elements, each step one element: _followed), the control's translation is
written into that node, and the control and its data agree; any other bound control whose
text the translation changed (a date, a list, rich text, a store that is no custom XML part
of the document, such as its core properties, or one that is no XML, an XPath not followed
here, controls of one node left showing different texts) loses its binding, and shows its
translation."""

from __future__ import annotations

import re
from collections.abc import Callable

from service.runtime.files.runs import _local

CUSTOM_XML_PROPS = (
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/customXmlProps"
)
DATASTORE = "{http://schemas.openxmlformats.org/officeDocument/2006/customXml}"
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# one step of an XPath followed here: a name, its prefix, its position among its namesakes
STEP = re.compile(r"/(?:([A-Za-z_][\w.-]*):)?([A-Za-z_][\w.-]*)(?:\[([1-9][0-9]{0,5})\])?")
MAPPING = re.compile(r"xmlns:([A-Za-z_][\w.-]*)\s*=\s*(['\"])(.*?)\2")
# what a control's text is made of: a run's text, a tab, a line break
SHOWN = {"t": None, "tab": "\t", "br": "\n", "cr": "\n"}


def _bindings(document, roots) -> Callable[[], None]:
    """What makes a .docx's bound controls (those of the parts `roots`) agree with their
    data, to be done once the translation is written and before the document is saved."""
    read = {key: [text for _, text in held] for key, held in _bound(roots).items()}

    def bind() -> None:
        stores = _Stores(document)
        for key, held in _bound(roots).items():
            texts = {text for _, text in held}
            if [text for _, text in held] == read.get(key):
                continue  # not translated: the control shows its data
            plain = all(sdt.find(f"{W}sdtPr/{W}text") is not None for sdt, _ in held)
            if not (plain and len(texts) == 1 and stores.write(*key, texts.pop())):
                for sdt, _ in held:
                    binding = sdt.find(f"{W}sdtPr/{W}dataBinding")
                    binding.getparent().remove(binding)
        stores.save()

    return bind


def _bound(roots) -> dict[tuple[str, str, str], list[tuple]]:
    """Each binding of the bound controls of `roots` (its store's id, XPath and prefix
    mappings) -> its controls, each with its text; a control that shows its placeholder
    holds no data, and is left out."""
    bound: dict[tuple[str, str, str], list[tuple]] = {}
    for root in roots:
        for sdt in root.iter(f"{W}sdt"):
            binding = sdt.find(f"{W}sdtPr/{W}dataBinding")
            if binding is None or sdt.find(f"{W}sdtPr/{W}showingPlcHdr") is not None:
                continue
            key = tuple(binding.get(W + name, "") for name in ("storeItemID", "xpath"))
            key += (binding.get(W + "prefixMappings", ""),)
            bound.setdefault(key, []).append((sdt, _shown(sdt)))
    return bound


def _shown(sdt) -> str:
    """The text a control shows: its runs' texts, tabs and line breaks, its paragraphs
    one a line."""
    content, shown = sdt.find(f"{W}sdtContent"), []
    for node in () if content is None else content.iter(f"{W}p", *(W + n for n in SHOWN)):
        name = _local(node.tag)
        if name == "p":
            shown.append("\n" if shown else "")
        else:
            shown.append(node.text or "" if SHOWN[name] is None else SHOWN[name])
    return "".join(shown)


class _Stores:
    """The custom XML parts of a document by their items' ids (customXml/itemPropsN.xml's
    ds:itemID), each parsed once it is needed, and saved where a node of it is written (one
    only read stays as it was, byte for byte); a part (or its properties) that is no XML is
    no store."""

    def __init__(self, document):
        self.package = document.part.package
        self.parts: dict | None = None
        self.parsed: dict = {}  # a part -> its root, None where it is no XML
        self.children: dict = {}  # an element followed through -> its children by tag
        self.written: dict = {}  # a part a node of which is written -> its root

    def write(self, store: str, xpath: str, mappings: str, text: str) -> bool:
        """Whether the binding names a node of text (_followed), which now holds `text`."""
        if self.parts is None:
            self.parts = self._parts()
        part = self.parts.get(store.upper())
        if part is None:
            return False
        if part not in self.parsed:
            self.parsed[part] = _parsed(part.blob)
        root = self.parsed[part]
        node = None if root is None else _followed(root, xpath, mappings, self.children)
        if node is None:
            return False
        node.text, self.written[part] = text, root
        return True

    def _parts(self) -> dict:
        parts = {}
        for part in self.package.iter_parts():
            for related in part.rels.values():
                if related.reltype == CUSTOM_XML_PROPS and not related.is_external:
                    properties = _parsed(related.target_part.blob)
                    if properties is not None:
                        parts[properties.get(DATASTORE + "itemID", "").upper()] = part
        return parts

    def save(self) -> None:
        from lxml import etree

        for part, root in self.written.items():
            tree = root.getroottree()
            encoding = tree.docinfo.encoding or "UTF-8"
            standalone = tree.docinfo.standalone
            part._blob = etree.tostring(
                tree, xml_declaration=True, encoding=encoding, standalone=standalone
            )


def _parsed(blob: bytes):
    """The root of XML `blob`, None where it is no XML."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, strip_cdata=False)
    try:
        return etree.fromstring(blob, parser)
    except etree.XMLSyntaxError:
        return None


def _followed(root, xpath: str, mappings: str, children: dict | None = None):
    """The element `xpath` names from the document node, where each of its steps is a name
    (prefixed as `mappings` declares: "xmlns:ns0='uri' ...") with at most a position, and
    leads to one element; None where it leads to none, to several, or to an element that
    holds more than text, or where the XPath is any other. `children`: the children by tag
    of the elements followed through (_named), kept between the XPaths of one root, so that
    following each is as long as its path, not as the lists it passes."""
    matched = list(STEP.finditer(xpath))
    if not matched or "".join(m.group(0) for m in matched) != xpath:
        return None
    namespaces = {prefix: uri for prefix, _, uri in MAPPING.findall(mappings)}
    children = {} if children is None else children
    node, held = None, {root.tag: [root]}
    for prefix, name, position in (m.groups() for m in matched):
        if prefix is not None and prefix not in namespaces:
            return None
        tag = f"{{{namespaces[prefix]}}}{name}" if prefix else name
        namesakes = held.get(tag, [])
        if position is None and len(namesakes) > 1:
            return None  # the XPath names them all
        if int(position or 1) > len(namesakes):
            return None
        node = namesakes[int(position or 1) - 1]
        held = _named(node, children)
    return node if len(node) == 0 else None


def _named(node, children: dict) -> dict:
    """The children of `node` by tag, in order, from `children` or made into it."""
    if node not in children:
        children[node] = named = {}
        for child in node:
            named.setdefault(child.tag, []).append(child)
    return children[node]
