"""Texts in HTML and XML (service.runtime.markup, protect's tag and entity items): the
markup is kept exactly, sentences never cross a block, tags nest as in the source."""

from __future__ import annotations

import pytest

from service.runtime import markup
from service.runtime.markup import blanked, split_markup, well_formed
from service.runtime.protect import mask
from tests.helpers import growth

PAGE = (
    "<p>Pulsa <b>Guardar</b> para salir. El gato duerme.</p>\n<ul><li>Uno</li><li>Dos &amp; "
    'tres</li></ul><!-- no. traducir. --><script>var a = "Hola. Adiós.";</script>'
)


def test_blanking_keeps_every_offset_and_cuts_at_blocks():
    flat = blanked(PAGE, "html")
    assert len(flat) == len(PAGE)
    assert "Guardar" in flat and "<b>" not in flat and "Hola" not in flat


def test_sentences_stay_inside_blocks_and_markup_outside_them_is_layout():
    document = split_markup(PAGE, "sentences", "html")
    assert document.sentence_texts() == [
        "Pulsa <b>Guardar</b> para salir.",
        "El gato duerme.",
        "Uno",
        "Dos &amp; tres",
    ]
    text, _ = document.join(["A.", "B.", "C", "D"])
    assert text.startswith("<p>A. B.</p>\n<ul><li>C</li><li>D</li></ul><!-- no. traducir. -->")
    assert text.endswith('<script>var a = "Hola. Adiós.";</script>')


def test_a_wrapped_html_source_keeps_its_sentences_whole():
    """A line break of HTML's source is a space as a browser shows it: a paragraph wrapped
    at 80 columns was cut at each of its lines, and the halves of a sentence translated
    apart. A `<pre>` shows its line breaks; XML and "lines" still cut at them."""
    page = "<p>El perro come\n  pan en <b>la\r\ncasa</b>.</p>\n<pre>uno\ndos</pre>"
    page += "<!-- <pre> -->Y\nfin."
    assert split_markup(page, "sentences", "html").sentence_texts() == [
        "El perro come\n  pan en <b>la\r\ncasa</b>.",
        "uno",
        "dos",
        "Y\nfin.",
    ]
    assert split_markup(page, "lines", "html").sentence_texts()[:2] == [
        "El perro come",
        "pan en <b>la",
    ]
    assert split_markup("<t>Hola\nmundo</t>", "sentences", "xml").sentence_texts() == [
        "Hola",
        "mundo",
    ]
    wrapped = "<p>" + "Uno dos\ntres cuatro. " * 12 + "</p>"
    parts = markup.parts(wrapped, 70)
    assert len(parts) > 2 and all(p.source.endswith("cuatro. ") for p in parts[:-1]), parts


def test_xml_tags_are_all_inline_and_plain_text_is_untouched():
    xml = "<doc><t>Hola mundo.</t> <t>Adiós.</t></doc>"
    assert split_markup(xml, "sentences", "xml").sentence_texts() == ["Hola mundo.", "Adiós."]
    plain = "Visita <b>esto</b>. Fin."
    assert split_markup(plain, "sentences", "plain").sentence_texts() == [
        "Visita <b>esto</b>.",
        "Fin.",
    ]


def test_inline_tags_come_back_around_the_marked_words_without_added_space():
    masked = mask('Pulsa <a href="/x?a=1&amp;b=2">Guardar</a> y &laquo;salir&raquo;.', True)
    assert "<a" not in masked.text and "&" not in masked.text
    assert [i.kind for i in masked.items] == ["tag", "tag", "entity", "entity"]
    out = masked.restore("Press ZZ1 Save ZZ2 and ZZ3 exit ZZ4.")
    assert out == 'Press <a href="/x?a=1&amp;b=2">Save</a> and &laquo;exit&raquo;.'


@pytest.mark.parametrize(
    "translation",
    [
        "ZZ3 ZZ4 ZZ1 Save ZZ2 file.",  # reordered
        "Save the file.",  # every marker lost
        "ZZ4 Save ZZ3 ZZ2 ZZ1 file.",  # reversed
        "ZZ1 ZZ1 Save ZZ2 ZZ3 ZZ4 file ZZ2.",  # repeated
    ],
)
def test_tags_nest_as_in_the_source_whatever_the_model_does_with_their_markers(translation):
    masked = mask("<b>Guardar</b> el <i><em>archivo</em></i>.", True)
    out = masked.restore(translation)
    assert well_formed(out), out
    for tag in ("<b>", "</b>", "<i>", "<em>", "</em>", "</i>"):
        assert out.count(tag) == 1, out


def test_well_formed_reads_nesting_void_elements_and_self_closed_tags():
    assert well_formed('<p>a <b>b <i>c</i></b><br><img src="x"/></p>')
    assert not well_formed("<b><i>x</b></i>")
    assert not well_formed("<b>x")


def test_an_xml_cdata_section_is_its_text_escaped_one_in_a_comment_or_script_stays():
    """In XML a CDATA section is text: written escaped it is translated as the text around
    it is (its `<b>` no tag, its `&` no entity). One inside a comment or a script, one
    never closed, and HTML's lowered `<![cdata[` (a bogus comment) are what they were."""
    kept = "<script>//<![CDATA[\nif (a < b) {}\n//]]></script><!-- <![CDATA[x]]> -->"
    text = f"{kept}<p><![CDATA[Tom & <b>Jerry</b> > 2]]> y <![CDATA[]]>más</p><![CDATA[sin fin"
    assert markup.cdata_as_text(text) == (
        f"{kept}<p>Tom &amp; &lt;b&gt;Jerry&lt;/b&gt; &gt; 2 y más</p><![CDATA[sin fin"
    )
    assert markup.cdata_as_text("<p><![cdata[x]]></p>") == "<p><![cdata[x]]></p>"
    document = split_markup(markup.cdata_as_text("<p><![CDATA[Hola.]]></p>"), "sentences", "xml")
    assert document.sentence_texts() == ["Hola."]


def test_hidden_spans_index_the_text_whatever_its_letters():
    """`İ`.lower() is two characters: the spans are found on a copy as long as the text."""
    text = "İİ<script>x</script><p>Hola</p><!-- c -->"
    spans = markup.hidden(text)
    assert [text[a:b] for a, b in spans] == ["<script>x</script>", "<!-- c -->"]
    assert markup.without_hidden(text) == "İİ<p>Hola</p>"


def test_a_document_type_with_an_internal_subset_holds_no_text():
    """`<!DOCTYPE doc [<!ENTITY ...>]>` ended at its first `>`: the rest of its entity
    declarations and its `]>` went to the model as a sentence, and came back translated."""
    xml = '<!DOCTYPE doc [\n  <!ENTITY autor "Ana > Luis">\n] >\n<doc><t>Hola &autor;.</t></doc>'
    assert split_markup(xml, "sentences", "xml").sentence_texts() == ["Hola &autor;."]
    assert markup.hidden(xml) == [(0, xml.index("\n<doc>"))]
    page = '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "x.dtd"><p>Hola.</p><!DOCTYPE x ['
    assert markup.hidden(page) == [(0, page.index("<p>")), (page.index("</p>") + 4, len(page))]


LONG = (
    '<p>El perro <b>come pan. La casa</b> es grande. Mira <a href="https://a.com/x?y=1&amp;z=2">'
    'este enlace. Es bueno</a> y <span class="x">útil. Buenos días.</span> Adiós.</p>'
)


def inline_tags(text: str) -> str:
    """The text without its paragraph's tags (a part opens or closes its block)."""
    return text.replace("<p>", "").replace("</p>", "")


@pytest.mark.parametrize("most", [100, 120, 170])
def test_a_long_text_is_cut_after_sentences_into_parts_that_nest_their_tags(most):
    parts = markup.parts(LONG, most)
    assert len(parts) > 1 and "".join(p.source for p in parts) == LONG
    assert all(len(p.text) <= most for p in parts)
    assert all(well_formed(inline_tags(p.text)) for p in parts), [p.text for p in parts]
    for part in parts:  # never inside a tag or an entity
        assert part.source.count("<") == part.source.count(">"), part.source
        assert not part.source.endswith(("&amp", "<a", "<b")), part.source


def test_an_inline_element_across_a_cut_is_closed_and_opened_again():
    first, second, third = markup.parts(LONG, 100)
    assert first == markup.Part("<p>El perro <b>come pan. La casa</b> es grande. ")
    assert second.source.endswith('<span class="x">útil. ') and second.closed == "</span>"
    assert third.opened == '<span class="x">' and third.source.startswith("Buenos días.</span>")
    translated = '<span class="x">Good morning.</span> Bye.</p>'
    assert translated[slice(*third.unwrapped(translated))] == "Good morning.</span> Bye.</p>"
    assert third.unwrapped("Good morning. Bye.</p>") == (0, 22)  # not kept: all of it


def test_a_cut_falls_where_the_fewest_elements_are_open_never_in_a_comment_or_script():
    text = "<p>Hola. <b>Uno.</b> <b>Dos.</b><!-- a. b. --> Tres. <script>x. y.</script>Cuatro.</p>"
    parts = markup.parts(text, 30)
    assert [p.source for p in parts] == [
        "<p>Hola. <b>Uno.</b> ",
        "<b>Dos.</b><!-- a. b. --> ",
        "Tres. <script>x. y.</script>",
        "Cuatro.</p>",
    ]
    assert all(not p.opened and not p.closed for p in parts)


def test_a_sentence_longer_than_a_part_is_refused():
    with pytest.raises(ValueError, match="a sentence longer than 30 characters"):
        markup.parts("<p>Hola. Una frase <b>muy larga</b> que no termina.</p>", 30)
    assert markup.parts("<p>Hola.</p>", 30) == [markup.Part("<p>Hola.</p>")]


def test_a_part_too_long_for_the_tags_it_repeats_says_so_not_that_a_sentence_is():
    """The start tag of a link open across a cut, repeated in the next part, made that part
    longer than the limit: the text was refused as "a sentence longer than 100 characters",
    its sentences being 36 characters at most."""
    link = '<a href="/' + "x" * 60 + '">'  # 72 characters
    text = f"<p>{link}Uno. Una frase algo más larga, de veinte.</a></p>"
    with pytest.raises(ValueError) as refused:
        markup.parts(text, 100)
    assert str(refused.value) == (
        'the sentence "Una frase algo más larga, de veinte." (36 characters) and the tags '
        "around it make a part of 116 characters, longer than 100 (72 of them repeat the tags "
        "of <a>, open across the part's ends)"
    )
    _, second = markup.parts(text, 116)
    assert second.opened == link and len(second.text) == 116


def test_a_tag_whose_quoted_attribute_holds_a_bracket_is_one_tag():
    """An attribute's value may hold ">" ("Siguiente >", "a > b"): the tag ended there, and
    the rest of it (` href="/x">`) went to the model as words and came back without its
    link."""
    sentence = 'Pulsa <a title="Siguiente >" href="/x">aquí</a> y <img alt=\'a > b\' src="x.png">.'
    masked = mask(sentence, True)
    assert masked.text == "Pulsa ZZ1 aquí ZZ2 y ZZ3."
    assert masked.restore("Press ZZ1 here ZZ2 and ZZ3.") == (
        'Press <a title="Siguiente >" href="/x">here</a> and <img alt=\'a > b\' src="x.png">.'
    )
    page = f"<p>{sentence}</p>"
    assert split_markup(page, "sentences", "html").sentence_texts() == [sentence]
    assert well_formed(page) and not well_formed('<p><a title="x>">y</p>')


def test_without_splitting_a_sentence_still_ends_at_blocks_and_keeps_out_of_hidden_text():
    """Splitting "none" made the whole text one sentence: comments and scripts went to the
    model as words and came back escaped and moved, block tags were items the model could
    move, and the tags a part adds around its text were inside the sentence, where the model
    moved them and they could not be taken off its translation."""
    page = PAGE.replace("para salir.", "para\nsalir.")
    assert split_markup(page, "none", "html").sentence_texts() == [
        "Pulsa <b>Guardar</b> para\nsalir. El gato duerme.",
        "Uno",
        "Dos &amp; tres",
    ]
    xml = "<doc><t>Hola\nmundo.</t> <!-- c --><t>Adiós.</t></doc>"
    assert split_markup(xml, "none", "xml").sentence_texts() == ["Hola\nmundo.", "Adiós."]
    for part in markup.parts(LONG, 100):
        (start, end), *more = split_markup(part.text, "none", "html").sentences
        assert not more and len(part.opened) <= start and end <= len(part.text) - len(part.closed)


@pytest.mark.parametrize("spaces", [" ", "\n", " \t"])
def test_a_tag_never_closed_before_a_long_run_of_white_space_is_read_at_once(spaces):
    """`<a` and white space no `>` ends: every split of the run between the tag's name and
    its attributes was tried, from each start, some 5 s for 20,000 spaces, 140 s for a text
    of the default limit, on the front's event loop (every other call waited)."""

    def text(length: int) -> str:
        return "<p><a" + spaces * (length // len(spaces)) + "hola.</p>"

    def read(length: int) -> None:
        split_markup(text(length), "sentences", "html")
        mask(text(length), True)

    assert growth(read, 5_000, 20_000) < 8  # linear: about 4
    assert split_markup(text(20_000), "sentences", "html").sentence_texts()[-1].endswith("hola.")


@pytest.mark.parametrize("after", ["Dos tres. ", "</q> Dos. "], ids=["sentences", "stray-ends"])
def test_a_text_of_deeply_nested_elements_is_cut_in_a_time_linear_in_its_length(after):
    """Every place a text may be cut copied the list of the elements open there, and every
    candidate cut built their end tags again; an end tag searched the whole list: 6 s for
    100 KB of 2,000 nested `<b>`, two minutes for 800 KB (an upload to /translate_file)."""

    def text(depth: int) -> str:
        return "<p>" + "<b>Uno. " * depth + after * (4 * depth) + "</b>" * depth + "</p>"

    assert growth(lambda depth: markup.parts(text(depth), 10 * depth), 500, 2000) < 8
    whole = text(2000)
    parts = markup.parts(whole, 20_000)
    assert "".join(p.source for p in parts) == whole and all(len(p.text) <= 20_000 for p in parts)
    assert parts[2].opened == "<b>" * 2000 and parts[1].closed == "</b>" * 2000
    assert all(well_formed(inline_tags(p.text).replace("</q>", "")) for p in parts)


@pytest.mark.parametrize(
    ("unit", "count", "tail"),
    [("…", 20_000, "x"), ("<i></i>", 6_000, ""), (".", 20_000, ")x")],
    ids=["ellipses", "empty-tags", "dots"],
)
def test_a_long_run_of_sentence_ends_or_white_space_is_read_once(unit, count, tail):
    """Where a text may be cut was searched from every place of a run of sentence ends, or
    of white space (inline tags are spaces there), with no space or line break after it: each
    search read to the run's end, 4 s for 20,000 characters, minutes for an upload's
    paragraph."""

    def text(quarters: int) -> str:  # a run of `count` quarters, and a text after it to cut
        run = unit * (count * quarters // 4) + tail
        return f"<p>Hola {run} adiós. " + "Uno. " * (2_000 * quarters) + "</p>"

    assert growth(lambda quarters: markup.parts(text(quarters), 12_500 * quarters), 1, 4) < 8
    whole = text(4)
    parts = markup.parts(whole, 50_000)
    assert len(parts) == 2 and "".join(p.source for p in parts) == whole
    assert parts[0].source.rstrip().endswith("Uno.") and len(parts[0].text) <= 50_000


XHTML_PAGE = (
    '<h:html xmlns:h="http://www.w3.org/1999/xhtml" xmlns:o="urn:schemas-microsoft-com:office:'
    'office"><h:body><h:p>Hola mundo</h:p><h:p>Adiós amigo<h:br/>hasta luego</h:p>'
    '<h:script>var a = "Hola. Adiós.";</h:script><h:p>Un <o:p>gato</o:p> negro</h:p>'
    "</h:body></h:html>"
)


def test_xhtml_elements_named_with_a_prefix_are_read_by_their_local_names():
    """`<h:p>` (h bound to XHTML's namespace) was an inline element of an unknown name: its
    paragraphs ran together as one sentence, with the markup between them, and the script's
    text went to the model. A prefix bound to another namespace (`o:p`) names no HTML
    element."""
    document = split_markup(XHTML_PAGE, "sentences", "html")
    assert document.sentence_texts() == [
        "Hola mundo",
        "Adiós amigo",
        "hasta luego",
        "Un <o:p>gato</o:p> negro",
    ]
    assert well_formed(XHTML_PAGE) and well_formed("<x:p>a<x:br>b</x:p>")
    piece = "<xhtml:div>Uno</xhtml:div><xhtml:div>Dos</xhtml:div>"  # bound in another piece
    assert split_markup(piece, "sentences", "html").sentence_texts() == ["Uno", "Dos"]
    assert markup.html_name("</H:P >") == "p" and markup.unprefixed("</H:P >") == "</P >"


def test_each_label_of_an_svg_image_in_a_page_is_a_sentence_of_its_own():
    """An SVG image's `<text>` elements, each a label placed apart, were inline: a chart's
    labels ran together as one sentence, and the model's markers moved words from one label
    to the next. Its prefixed elements read as unprefixed ones: `<s:style>` holds no text."""
    svg = '<svg><title>Vientos</title><text x="1">Norte</text><text x="9">Sur</text>'
    svg += "<text><tspan>Este</tspan> y oeste</text><desc>Un mapa</desc></svg>"
    assert split_markup(f"<p>Mapa:</p>{svg}", "sentences", "html").sentence_texts() == [
        "Mapa:",
        "Vientos",
        "Norte",
        "Sur",
        "Este</tspan> y oeste",
        "Un mapa",
    ]
    page = '<p xmlns:s="http://www.w3.org/2000/svg">Mapa <s:svg><s:style>.a {}</s:style>'
    page += "<s:text>Norte</s:text><s:text>Sur</s:text></s:svg></p>"
    assert split_markup(page, "sentences", "html").sentence_texts() == ["Mapa", "Norte", "Sur"]


def test_a_prefixed_line_break_opens_nothing_where_a_text_is_cut():
    text = "<h:p>" + "<h:b>Uno.</h:b> <h:br> " * 8 + "</h:p>"
    parts = markup.parts(text, 60)
    assert len(parts) > 1 and "".join(p.source for p in parts) == text
    assert all(not p.opened and not p.closed for p in parts), parts
