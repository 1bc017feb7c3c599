"""LocalAgreement-2 on word lists: only words two passes in a row agree on are committed."""

from __future__ import annotations

from pipeline.services.local_agreement import LocalAgreement, agreed_words


def test_agreed_words_ignores_case_and_punctuation_and_stops_at_the_first_difference() -> None:
    assert agreed_words("Can you book a".split(), "can you, book the table".split()) == 3
    assert agreed_words([], "anything".split()) == 0
    assert agreed_words("late.".split(), "late,".split()) == 1
    assert agreed_words("four".split(), "fourteen".split()) == 0


def test_one_pass_commits_nothing() -> None:
    agreement = LocalAgreement()
    assert agreement.update("Can you book a table") == []
    assert agreement.text == ""


def test_two_passes_commit_their_common_start_but_not_the_older_pass_last_word() -> None:
    agreement = LocalAgreement()
    agreement.update("Can you book a")
    # "a" was the first pass's last word (its audio may have ended inside it): kept back.
    assert agreement.update("Can you book a table for four") == ["Can", "you", "book"]
    assert agreement.update("Can you book a table for fourteen people") == ["a", "table", "for"]
    assert agreement.text == "Can you book a table for"


def test_committed_words_are_never_taken_back() -> None:
    agreement = LocalAgreement()
    agreement.update("Please call Maria and")
    agreement.update("Please call Maria and tell")
    assert agreement.text == "Please call Maria"
    # A pass that hears it differently commits nothing, and takes nothing back.
    assert agreement.update("Please call Mario and tell her") == []
    assert agreement.update("Please call Mario and tell her I will") == []
    assert agreement.text == "Please call Maria"


def test_the_prefix_leaves_the_last_word_open_to_its_punctuation() -> None:
    agreement = LocalAgreement()
    agreement.update("I will be late. And")
    agreement.update("I will be late. And then")
    assert agreement.text == "I will be late."
    assert agreement.prefix == "I will be late"
