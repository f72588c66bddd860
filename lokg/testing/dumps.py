"""Golden dumps the tests write: N-Triples lines (each edge case, each malformed kind), a
documents corpus with its OpenIE extraction, MetaQA files."""

from __future__ import annotations

import json

FB = "http://rdf.freebase.com/ns/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
XSD_DATE = "http://www.w3.org/2001/XMLSchema#date"
FOAF_KNOWS = "http://xmlns.com/foaf/0.1/knows"
BOB = "http://example.org/bob"


def fb(local: str) -> str:
    """The N-Triples IRI of a Freebase name."""
    return f"<{FB}{local}>"


#: A golden N-Triples dump, one line per case: names, aliases, attributes, types, edges, blanks,
#: comments, tabs, and one malformed line of each kind (NT_MALFORMED: line number → reason).
NT_LINES = [
    "# Freebase-style dump",  # 1 comment
    f'{fb("m.01")} {fb("type.object.name")} "Alice \\"Al\\" Smith"@en .',  # 2 name, escaped quotes
    f'{fb("m.01")} {fb("type.object.name")} "Alice FR"@fr .',  # 3 filtered
    f'{fb("m.01")} {fb("type.object.name")} "Alicia"@en .',  # 4 second name: not the name
    f'{fb("m.01")} {fb("common.topic.alias")} "Ally"@en .',  # 5
    f'{fb("m.01")} {fb("common.topic.alias")} "Ally"@en .',  # 6 duplicate alias
    f'{fb("m.01")} {fb("common.topic.alias")} "Al\\u00e9 \\U0001F600"@en-GB .',  # 7 subtag, escapes
    f'{fb("m.01")} {fb("common.topic.alias")} "Alita"@de .',  # 8 filtered
    f'{fb("m.01")} {fb("common.topic.description")} "Line one\\nline two\\\\"@en .',  # 9
    f'{fb("m.01")} {fb("people.person.date_of_birth")} "1961-08-04"^^<{XSD_DATE}> .',  # 10
    f'{fb("m.01")} {fb("people.person.height_meters")} "1.70" .',  # 11 untagged attribute
    f'{fb("m.01")} {fb("type.object.type")} {fb("people.person")} .',  # 12 type, not an edge
    f"{fb('m.01')} {fb('people.person.place_of_birth')} {fb('m.02')} .",  # 13 edge
    "",  # 14 blank
    f"{fb('m.01')}\t{fb('people.person.place_of_birth')}\t{fb('m.02')}\t.",  # 15 duplicate, tabs
    f"{fb('m.01')} <{FOAF_KNOWS}> <{BOB}> .",  # 16 non-Freebase predicate and object
    f'<{BOB}> <{RDFS_LABEL}> "Bob"@en .',  # 17 rdfs:label name
    f"<{BOB}> <{RDF_TYPE}> <http://example.org/Person> .",  # 18 rdf:type
    f"<{BOB}> <http://example.org/owns> _:b1 .",  # 19 blank node object
    f'{fb("m.03")} {fb("type.object.name")} "Trois"@fr .',  # 20 only a filtered name
    f'{fb("m.01")} {fb("people.person.date_of_birth")} "1961-08-04"^^<{XSD_DATE}> .',  # 21 dup attr
    "   # indented comment",  # 22
    # malformed, one of each kind
    f"{fb('m.01')} {fb('people.person.place_of_birth')} {fb('m.02')}",  # 23 no final dot
    f"{fb('m.01')} {fb('people.person.place_of_birth')} <{FB}m.0ab",  # 24 truncated IRI
    f"{fb('m.01')} {fb('people.person.place_of_birth')} .",  # 25 two terms
    f'{fb("m.01")} {fb("type.object.name")} "Unterminated @en .',  # 26 unterminated literal
    "%% this is not a triple ;;",  # 27 garbage
    f"<> {fb('people.person.place_of_birth')} {fb('m.02')} .",  # 28 empty IRI
    f'"lit" {fb("people.person.place_of_birth")} {fb("m.02")} .',  # 29 literal subject
    f"{fb('m.01')} {fb('a.b.c')} {fb('m.02')} {fb('m.03')} .",  # 30 four terms
    f'{fb("m.01")} {fb("a.b.c")} "x"^^xsd:date .',  # 31 prefixed datatype: not N-Triples
    f"{fb('m.04')}\t{fb('type.object.name')}\t\"Tabbed\"@en\t.",  # 32 tab-separated, valid
]
NT_MALFORMED = {
    23: "missing the terminating",
    24: "unterminated IRI",
    25: "only 2 terms",
    26: "unterminated literal",
    27: "not an N-Triples statement",
    28: "empty IRI",
    29: "literal in subject position",
    30: "more than 3 terms",
    31: "invalid language tag or datatype",
}


COUNTRIES = ["Aldoria", "Berunia", "Casmark", "Doravia"]
CITIES = [f"{a}{b}" for a in ("Port ", "Lake ", "Mount ") for b in ("Elm", "Ash", "Oak", "Yew")]
PEOPLE = [f"{f} {s}" for f in ("Ada", "Boris", "Clara", "Dmitri", "Elena", "Farid")
          for s in ("Quist", "Roan", "Sallow", "Tamm", "Ulver")]


def corpus() -> tuple[list[dict], list[dict]]:
    """Articles of a small world and their exact OpenIE extraction (HippoRAG's shape)."""
    docs, openie = [], []
    for i, city in enumerate(CITIES):
        country = COUNTRIES[i % len(COUNTRIES)]
        text = (f"{city} is a city in {country}. It was founded in {1700 + 7 * i} by fishermen. "
                f"Its harbour froze every winter until {1900 + i}.")
        docs.append({"title": city, "text": text})
        openie.append({"title": city, "text": text, "extracted_entities": [city, country],
                       "extracted_triples": [[city, "city in", country]]})
    for i, person in enumerate(PEOPLE):
        city, friend = CITIES[(3 * i) % len(CITIES)], PEOPLE[(i + 7) % len(PEOPLE)]
        text = (f"{person} is a painter. {person} was born in {city} in {1950 + i}, "
                f"during a storm. {person.split()[0]} later studied with {friend}.")
        docs.append({"title": person, "text": text})
        openie.append({"title": person, "text": text, "extracted_entities": [person, city],
                       "extracted_triples": [[person, "born in", city],
                                             [person, "studied with", friend]]})
    return docs, openie


def write_corpus(dump, docs: list[dict], openie: list[dict]) -> None:
    """A documents dump: the corpus (and one record without text) and its extraction."""
    dump.mkdir()
    (dump / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs) +
                                       '{"title": "no text"}\n')
    (dump / "openie_exact.json").write_text(json.dumps({"docs": openie}))


#: A MetaQA knowledge base and test split, in its own formats.
METAQA_KB = ("Kismet|directed_by|William Dieterle\nKismet|starred_actors|Marlene Dietrich\n"
             "Top Hat|starred_actors|Ginger Rogers\nKitty Foyle|starred_actors|Ginger Rogers\n")
METAQA_TEST = ("what movies are about [Ginger Rogers]\tTop Hat|Kitty Foyle|Top Hat\n"
               "\n"
               "who directed [Kismet]\tWilliam Dieterle\n")
