"""Provider settings ([providers.NAME] in Settings): model limits, prices as exact decimal
strings, the currency; a bad one is refused naming the table and the key."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from behest.config import Settings
from behest.domain.content import ContentPart, PartKind
from behest.domain.spend import Money, Prices, TokenUsage
from behest.providers.config import CACHE_BREAKPOINTS, ModelInfo, ProviderConfig
from behest.providers.factory import build_registry
from behest.providers.retry import RetryPolicy

MODEL = "gpt-4o-mini"


def providers(tables: dict[str, Any], **settings: Any) -> tuple[ProviderConfig, ...]:
    """The providers of these [providers.NAME] tables, checked as at start-up."""
    values = {"providers": tables, **settings}
    return Settings().with_values(values, source="tests").provider_configs()


def parse(**table: Any) -> ProviderConfig:
    [config] = providers({"oa": {"type": "openai", **table}})
    return config


def priced(**prices: Any) -> ProviderConfig:
    return parse(models={MODEL: prices})


def test_a_model_without_prices_has_none() -> None:
    config = parse(models={MODEL: {"context_window": 8000, "max_output_tokens": 256}})
    openai_default = ("image/*", "application/pdf")
    assert config.model_info(MODEL) == ModelInfo(8000, 256, prices=None, input_media=openai_default)
    assert config.model_info("unlisted").prices is None
    assert config.currency == "USD"


def test_prices_are_exact_decimals_in_the_providers_currency() -> None:
    config = parse(
        currency="EUR",
        models={
            MODEL: {
                "input_price": "0.15",
                "output_price": "0.60",
                "cached_input_price": "0.075",
                "cache_write_price": "0.1875",
            }
        },
    )
    assert config.currency == "EUR"
    assert config.model_info(MODEL).prices == Prices(
        input=Decimal("0.15"),
        output=Decimal("0.60"),
        cached_input=Decimal("0.075"),
        cache_write=Decimal("0.1875"),
        currency="EUR",
    )


def test_cache_prices_are_optional_and_costs_are_exact() -> None:
    prices = priced(input_price="0.1", output_price="0.2").model_info(MODEL).prices
    assert prices == Prices(input=Decimal("0.1"), output=Decimal("0.2"), currency="USD")
    usage = TokenUsage(input_tokens=3, output_tokens=3, cached_input_tokens=3)
    # Cached tokens at the input price; in floats 0.3 + 0.6 + 0.3 would not be 1.2.
    assert usage.cost(prices) == Money(Decimal("0.0000012"), "USD")


@pytest.mark.parametrize("value", [0.15, 1, 0, True])
def test_a_price_that_is_not_a_string_is_refused_with_the_way_to_write_it(value: object) -> None:
    with pytest.raises(ValueError) as caught:
        priced(input_price=value, output_price="0.6")
    message = str(caught.value)
    assert message.startswith("tests: setting 'providers.oa.models.gpt-4o-mini.input_price': ")
    assert 'prices are decimal strings, e.g. input_price = "0.15", never floats' in message


@pytest.mark.parametrize(
    "value", ["-0.01", "NaN", "sNaN", "Infinity", "-inf", "0.15 USD", "", "1,5", "1000000.01"]
)
def test_a_bad_price_is_refused_naming_provider_model_and_field(value: str) -> None:
    expected = (
        "setting 'providers.oa.models.gpt-4o-mini.cache_write_price': must be a decimal price "
        "per million tokens from 0 to 1000000"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        priced(input_price="1", output_price="2", cache_write_price=value)


def test_an_absurd_exponent_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"output_price': must be a decimal price"):
        priced(input_price="1", output_price="1e999999999999999999999")


@pytest.mark.parametrize("value", ["0", "1000000", " 2.50 ", "1e2"])
def test_prices_from_zero_to_a_million_are_taken(value: str) -> None:
    prices = priced(input_price=value, output_price="1").model_info(MODEL).prices
    assert prices is not None and prices.input == Decimal(value.strip())


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"input_price": "1"}, "output_price missing"),
        ({"output_price": "1"}, "input_price missing"),
        ({"cached_input_price": "1"}, "input_price and output_price missing"),
    ],
)
def test_input_and_output_prices_come_together(given: dict[str, str], missing: str) -> None:
    where = f"setting 'providers.oa.models.{MODEL}': {missing}; a model's prices need both"
    with pytest.raises(ValueError, match=re.escape(where)):
        priced(**given)


@pytest.mark.parametrize("currency", ["usd", "US", "EURO", "USD\n", "", 978])
def test_a_currency_must_be_three_capital_letters(currency: object) -> None:
    expected = "setting 'providers.oa.currency': must be 3 capital letters (ISO 4217)"
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse(currency=currency)


def test_an_unknown_model_key_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(
        ValueError,
        match=r"setting 'providers\.oa\.models\.gpt-4o-mini\.input_cost': Extra inputs are "
        r"not permitted \(allowed: context_window, .*, cache_write_price, input_media\)$",
    ):
        priced(input_cost="1")


def test_an_unknown_provider_key_is_refused_without_its_value() -> None:
    with pytest.raises(ValueError, match=r"'providers\.oa\.api_key': Extra .*api_key_env") as err:
        parse(api_key="sk-pasted-here")
    assert "sk-pasted-here" not in str(err.value)


def test_a_model_name_that_is_no_bare_key_is_quoted_as_in_the_file() -> None:
    with pytest.raises(
        ValueError, match=r"""'providers\.oa\.models\."gpt-4\.1"\.context_window'"""
    ):
        parse(models={"gpt-4.1": {"context_window": -1}})


@pytest.mark.parametrize("value", [-1, "many", True, None, float("inf"), float("nan")])
def test_a_bad_limit_names_its_field(value: object) -> None:
    expected = "setting 'providers.oa.models.gpt-4o-mini.context_window': must be a whole number"
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse(models={MODEL: {"context_window": value}})


def test_a_local_provider_prices_its_models_and_knows_no_others() -> None:
    table = {
        "type": "local",
        "models": {"script": {"input_price": "1.5", "output_price": "3"}, "echo": {}},
    }
    [config] = providers({"priced": table})
    registry = build_registry([config], retry=RetryPolicy(), timeout_s=60.0)
    registry.check("priced", "script")
    prices = registry.model_info("priced", "script").prices
    assert prices == Prices(input=Decimal("1.5"), output=Decimal(3), currency="USD")
    assert registry.model_info("priced", "echo").prices is None
    assert registry.model_info("local", "script").prices is None
    with pytest.raises(
        ValueError, match=r"'providers\.priced\.models': a local .* echo, script, not 'scripted'"
    ):
        table["models"] = {"scripted": {}}
        providers({"priced": table})


def test_a_float_price_in_the_settings_file_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "behest.toml"
    config.write_text(
        '[providers.priced]\ntype = "local"\n'
        '[providers.priced.models.script]\ninput_price = 0.15\noutput_price = "0.6"\n'
    )
    with pytest.raises(ValueError, match=r"input_price': .* never floats \(got 0\.15\)"):
        Settings.load(config_file=str(config))


def test_prices_in_the_settings_file(tmp_path: Path) -> None:
    config = tmp_path / "behest.toml"
    config.write_text(
        '[providers.priced]\ntype = "local"\ncurrency = "GBP"\n'
        '[providers.priced.models.script]\ninput_price = "1.5"\noutput_price = "3"\n'
        'cached_input_price = "0.15"\n'
    )
    [priced_config] = Settings.load(config_file=str(config)).provider_configs()
    assert priced_config.model_info("script").prices == Prices(
        input=Decimal("1.5"),
        output=Decimal(3),
        cached_input=Decimal("0.15"),
        currency="GBP",
    )


def test_input_media_say_what_a_model_takes_beside_text() -> None:
    config = parse(models={MODEL: {"input_media": ["image/png"]}, "text-only": {"input_media": []}})
    png = ContentPart.inline(PartKind.IMAGE, "image/png", b"png")
    gif = ContentPart.inline(PartKind.IMAGE, "image/gif", b"gif")
    by_url = ContentPart(kind=PartKind.IMAGE, url="https://example.com/a")
    words = ContentPart.text_part("hello")
    assert [config.model_info(MODEL).takes(p) for p in (png, gif, by_url, words)] == [
        True,
        False,
        False,
        True,
    ]
    assert not config.model_info("text-only").takes(png)
    assert config.model_info("text-only").takes(words)
    # Unlisted models take what their provider type takes: any image, PDFs.
    assert config.model_info("unlisted").takes(gif)
    assert config.model_info("unlisted").takes(by_url)


@pytest.mark.parametrize("value", ["image/png", ["image"], ["IMAGE/PNG"], [3]])
def test_bad_input_media_are_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ValueError, match=r"models\.gpt-4o-mini\.input_media': must be a list"):
        parse(models={MODEL: {"input_media": value}})


def test_unset_retry_fields_and_timeout_take_the_servers_settings() -> None:
    tables = {
        "own": {"type": "openai", "max_attempts": 2, "timeout_s": 5},
        "bare": {"type": "local"},
    }
    own, bare = providers(tables, provider_max_attempts=6, provider_timeout_s=30)
    assert (own.retry.max_attempts, own.timeout_s) == (2, 5.0)
    assert bare.retry == RetryPolicy(max_attempts=6) and bare.timeout_s == 30.0
    assert (own.cache_breakpoints, parse(type="anthropic").cache_breakpoints) == (
        (),
        CACHE_BREAKPOINTS,
    )


def test_the_tables_are_checked_and_made_once() -> None:
    settings = Settings().with_values({"providers": {"oa": {"type": "openai"}}}, source="tests")
    assert settings.provider_configs() is settings.provider_configs()
    # A copy (as settings reload makes) keeps the tables, and follows the server's defaults.
    copy = settings.with_values({"provider_max_attempts": 9}, source="tests")
    [config] = copy.provider_configs()
    assert config.retry.max_attempts == 9 and copy.providers == settings.providers


@pytest.mark.parametrize("name", ["has space", "slash/no", ""])
def test_a_bad_provider_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"a provider's name may use letters, digits") as err:
        providers({name: {"type": "local"}})
    assert f"(got {name!r})" in str(err.value)


def test_the_key_is_read_from_its_variable_or_file_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BEHEST_TEST_KEY", "sk-from-env")
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    by_env, by_file = providers(
        {
            "env": {"type": "openai", "api_key_env": "BEHEST_TEST_KEY"},
            "file": {"type": "anthropic", "api_key_file": str(key_file)},
        }
    )
    assert (by_env.api_key, by_file.api_key) == ("sk-from-env", "sk-from-file")
    settings = Settings().with_values(
        {"providers": {"oa": {"type": "openai", "api_key_env": "BEHEST_TEST_KEY"}}}, source="t"
    )
    assert "sk-from-env" not in repr(settings) + repr(settings.provider_configs())
    assert "sk-from-env" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"api_key_env": "BEHEST_TEST_UNSET"}, "environment variable BEHEST_TEST_UNSET is not set"),
        ({"api_key_file": "/nonexistent/key"}, "api_key_file: cannot read it: No such file"),
        ({"api_key_env": "sk-abc-123"}, "must name an environment variable"),
    ],
)
def test_a_key_that_cannot_be_read_names_the_provider_not_the_key(
    table: dict[str, str], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BEHEST_TEST_UNSET", raising=False)
    with pytest.raises(ValueError, match=r"setting 'providers\.oa(\.api_key_env)?': ") as err:
        parse(**table)
    assert problem in str(err.value)
    assert "sk-abc" not in str(err.value)
