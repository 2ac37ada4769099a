"""Provider settings: model limits, prices as exact decimal strings, the currency."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from behest.config import Settings
from behest.domain.content import ContentPart, PartKind
from behest.domain.spend import Money, Prices, TokenUsage
from behest.providers.config import ModelInfo, ProviderConfig, parse_providers
from behest.providers.factory import build_registry
from behest.providers.retry import RetryPolicy

MODEL = "gpt-4o-mini"


def parse(**table: Any) -> ProviderConfig:
    raw = {"type": "openai", **table}
    return parse_providers({"oa": raw}, defaults=RetryPolicy(), timeout_s=60.0)[0]


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
    assert message.startswith('providers.oa.models."gpt-4o-mini".input_price: ')
    assert 'prices are decimal strings, e.g. input_price = "0.15", never floats' in message


@pytest.mark.parametrize(
    "value", ["-0.01", "NaN", "sNaN", "Infinity", "-inf", "0.15 USD", "", "1,5", "1000000.01"]
)
def test_a_bad_price_is_refused_naming_provider_model_and_field(value: str) -> None:
    expected = (
        'providers.oa.models."gpt-4o-mini".cache_write_price must be a decimal price per '
        "million tokens from 0 to 1000000"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        priced(input_price="1", output_price="2", cache_write_price=value)


def test_an_absurd_exponent_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"output_price must be a decimal price"):
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
    with pytest.raises(ValueError, match=re.escape(f'providers.oa.models."{MODEL}": {missing}')):
        priced(**given)


@pytest.mark.parametrize("currency", ["usd", "US", "EURO", "USD\n", "", 978])
def test_a_currency_must_be_three_capital_letters(currency: object) -> None:
    with pytest.raises(ValueError, match=r"providers\.oa\.currency must be 3 capital letters"):
        parse(currency=currency)


def test_an_unknown_model_key_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(
        ValueError, match=r"may set context_window, .*, cache_write_price, input_media only"
    ):
        priced(input_cost="1")


@pytest.mark.parametrize("value", [-1, "many", True, None, float("inf"), float("nan")])
def test_a_bad_limit_names_its_field(value: object) -> None:
    with pytest.raises(ValueError, match=r'"gpt-4o-mini"\.context_window must be a whole number'):
        parse(models={MODEL: {"context_window": value}})


def test_a_local_provider_prices_its_models_and_knows_no_others() -> None:
    table = {
        "type": "local",
        "models": {"script": {"input_price": "1.5", "output_price": "3"}, "echo": {}},
    }
    [config] = parse_providers({"priced": table}, defaults=RetryPolicy(), timeout_s=60.0)
    registry = build_registry([config], retry=RetryPolicy(), timeout_s=60.0)
    registry.check("priced", "script")
    prices = registry.model_info("priced", "script").prices
    assert prices == Prices(input=Decimal("1.5"), output=Decimal(3), currency="USD")
    assert registry.model_info("priced", "echo").prices is None
    assert registry.model_info("local", "script").prices is None
    with pytest.raises(ValueError, match=r'providers\.priced\.models\."scripted": a local'):
        table["models"] = {"scripted": {}}
        parse_providers({"priced": table}, defaults=RetryPolicy(), timeout_s=60.0)


def test_a_float_price_in_the_settings_file_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "behest.toml"
    config.write_text(
        '[providers.priced]\ntype = "local"\n'
        '[providers.priced.models.script]\ninput_price = 0.15\noutput_price = "0.6"\n'
    )
    with pytest.raises(ValueError, match=r"never floats; got 0\.15"):
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
    with pytest.raises(ValueError, match=r'models."gpt-4o-mini".input_media must be a list'):
        parse(models={MODEL: {"input_media": value}})
