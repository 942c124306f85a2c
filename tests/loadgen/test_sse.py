"""The event-stream parser against the HTML standard's rules, whole and split at every byte."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from loadgen.sse import Event, SSEParser

STREAM = (
    "\ufeff: a comment, then a CRLF event\r\n"
    'data: {"a": 1}\r\n\r\n'
    "event: update\rdata:no-space\rdata:  two spaces\r\r"
    ": keep-alive\n\n"
    "id: 7\ndata: h\u00e9llo \u4e16\u754c \U0001f600\n\n"
    "data\n\n"
    "event: lonely\n\n"
    "retry: 10\nunknown: x\ndata: [DONE]\n\n"
    "data: never dispatched"
).encode()

EXPECTED = [
    Event('{"a": 1}'),
    Event("no-space\n two spaces", "update"),
    Event("h\u00e9llo \u4e16\u754c \U0001f600"),
    Event(""),  # "data" without a colon: the field with an empty value; the buffer is "\n"
    Event("[DONE]"),
]


def parse(chunks: list[bytes]) -> list[Event]:
    parser = SSEParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_whole_stream_follows_the_standard() -> None:
    parser = SSEParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.last_event_id == "7"


def test_every_two_way_split_gives_the_same_events() -> None:
    for cut in range(len(STREAM) + 1):
        assert parse([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_one_byte_at_a_time() -> None:
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    assert parse([STREAM[a:b] for a, b in itertools.pairwise(bounds)]) == EXPECTED


def test_cr_at_the_end_of_a_read_and_lf_at_the_start_of_the_next_are_one_line_end() -> None:
    # If CR and LF were two line ends, the empty line between them would dispatch "a" early
    # and "b" would become a separate event.
    assert parse([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [Event("a\nb")]


def test_invalid_utf8_becomes_replacement_character() -> None:
    assert parse([b"data: \xff\xfe ok\n\n"]) == [Event("\ufffd\ufffd ok")]


def test_unicode_line_separators_inside_data_do_not_split_lines() -> None:
    # U+2028 and U+0085 are line breaks for str.splitlines() but not for an event stream.
    assert parse(["data: a\u2028b\u0085c\n\n".encode()]) == [Event("a\u2028b\u0085c")]


def test_an_id_with_nul_is_ignored() -> None:
    parser = SSEParser()
    parser.feed(b"id: 1\n\nid: 2\x003\ndata: x\n\n")
    assert parser.last_event_id == "1"
