"""The chunker: one chunk per ##/### section, and what the indexed text keeps."""

from datetime import datetime

from lethe_sql.markdown import Document, content_id, parse


def texts(md, name="2026-10-30.md"):
    return [c.text for c in parse(md, name)]


def test_one_chunk_per_h2_and_h3_section():
    md = "## a\nalpha\n### b\nbeta\n## c\ngamma\n"
    chunks = parse(md, "2026-10-30.md")
    assert [c.heading for c in chunks] == ["a", "b", "c"]
    assert [c.text for c in chunks] == ["alpha", "beta", "gamma"]
    assert [c.position for c in chunks] == [0, 1, 2]


def test_preamble_is_its_own_chunk_and_title_is_not_indexed():
    md = "# Notes for the day\nloose line before any section\n## first\nbody\n"
    chunks = parse(md, "x.md")
    assert [(c.heading, c.text) for c in chunks] == [(None, "loose line before any section"), ("first", "body")]
    assert all("Notes for the day" not in c.content for c in chunks)


def test_heading_only_and_empty_sections_are_dropped():
    md = "# Title\n## empty\n\n## only comment\n<!-- nothing here -->\n## real\ntext\n"
    assert texts(md) == ["text"]


def test_heading_lines_and_whole_line_comments_are_not_indexed():
    md = "## 09:30 deploy\nline one\n<!-- lethe session=s1 turn=2 -->\n<!--\nmulti\nline\n-->\nline two <!-- inline stays -->\n#### detail\nmore\n"
    (c,) = parse(md, "2026-10-30.md")
    assert c.text == "line one\nline two <!-- inline stays -->\ndetail\nmore"
    assert c.content.startswith("## 09:30 deploy\n")
    assert "multi" in c.content and "multi" not in c.text
    assert c.session_id == "s1"


def test_hashes_inside_code_fences_are_not_headings():
    md = "## notes\n```bash\n## not a heading\n# nor a title\n```\nafter\n"
    (c,) = parse(md, "x.md")
    assert "## not a heading" in c.text and "# nor a title" in c.text and c.text.endswith("after")


def test_hashtags_without_space_are_text():
    assert texts("#tag at start\n##also text\n") == ["#tag at start\n##also text"]


def test_ids_are_content_hashes_stable_across_edits_elsewhere():
    a = parse("## one\nsame words\n## two\nother\n", "f.md")
    b = parse("## renamed\n\nsame   words\n\n## new\nadded\n## two\nother\n", "f.md")
    assert a[0].id == b[0].id == content_id("same words")
    assert a[1].id == b[2].id
    assert len({c.id for c in b}) == 3


def test_created_at_from_heading_timestamp_or_file_date():
    md = "## 2026-11-03 14:02:05 fixed it\nx\n## 09:15\ny\n### decision\nw\n## plain\nz\n"
    cs = parse(md, ".lethe/memory/2026-11-01.md")
    assert [c.created_at for c in cs] == [
        datetime(2026, 11, 3, 14, 2, 5),
        datetime(2026, 11, 1, 9, 15),
        datetime(2026, 11, 1, 9, 15),   # no time of its own: written after the section above
        datetime(2026, 11, 1, 9, 15),
    ]
    # before any heading that states a time: the file's date
    assert [c.created_at for c in parse("## a\nx\n## 10:00 b\ny\n", "2026-11-01.md")] == [
        datetime(2026, 11, 1, 0, 0), datetime(2026, 11, 1, 10, 0)]
    assert parse("## x\ny\n", "notes.md")[0].created_at is None


def test_session_id_defaults_to_file_stem():
    assert parse("## x\ny\n", ".lethe/memory/2026-11-01.md")[0].session_id == "2026-11-01"


def test_crlf_bom_and_trailing_hashes():
    md = "\ufeff## head ##\r\nbody\r\n"
    (c,) = parse(md, "x.md")
    assert c.heading == "head" and c.text == "body"


def test_document_to_chunk_uses_content_hash():
    d = Document("  Caroline: I went to the support group.  ", heading="D1:3", session_id="s1")
    c = d.to_chunk(4, "bench")
    assert c.id == content_id("Caroline: I went to the support group.")
    assert (c.position, c.heading, c.session_id) == (4, "D1:3", "s1")


def test_a_remembered_section_still_takes_its_files_date_and_its_own_secrets_out():
    """``markdown._section_parts`` is memoised: the same section in two files keeps each
    file's date, and a remembered section is redacted like a fresh one."""
    from lethe_sql.markdown import parse

    text = "## note\nDeploys go out at 10:00. token ghp_0123456789abcdefghijABCDEFGHIJ0123456789\n"
    a = parse(text, "2026-01-02.md")[0]
    b = parse(text, "2026-03-04.md")[0]
    again = parse(text, "2026-01-02.md")[0]
    assert a.id == b.id == again.id
    assert (a.created_at.date().isoformat(), b.created_at.date().isoformat()) == ("2026-01-02", "2026-03-04")
    assert "ghp_" not in again.text and "ghp_" not in again.content and again.redacted == a.redacted == 1
