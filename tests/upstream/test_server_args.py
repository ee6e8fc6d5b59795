"""llama-server options → xllamacpp CommonParams assignments (pure), and their real targets."""

from __future__ import annotations

import pytest

from proxy.upstream.server_args import (
    OPTIONS,
    EnumMember,
    UnsupportedOptions,
    xllamacpp_assignments,
)
from proxy.upstream.xllamacpp_child import make_params


def test_the_options_the_proxy_and_the_e2e_suite_use() -> None:
    args = ["-m", "g.gguf", "-c", "4096", "--host", "127.0.0.1", "--port", "8080"]
    args += ["--parallel", "1", "-t", "1", "--no-jinja", "--chat-template", "gemma"]
    args += ["--embeddings", "--pooling", "mean", "-b", "2048", "-ub", "2048", "--no-repack"]
    args += ["--seed", "42", "--no-cache-prompt", "--no-webui", "--log-colors", "off"]
    assert xllamacpp_assignments(args) == [
        ("model.path", "g.gguf"),
        ("n_ctx", 4096),
        ("hostnames", ["127.0.0.1"]),
        ("port", 8080),
        ("n_parallel", 1),
        ("cpuparams.n_threads", 1),
        ("use_jinja", False),
        ("chat_template", "gemma"),
        ("embedding", True),
        ("pooling_type", EnumMember("llama_pooling_type", "LLAMA_POOLING_TYPE_MEAN")),
        ("n_batch", 2048),
        ("n_ubatch", 2048),
        ("no_extra_bufts", True),
        ("sampling.seed", 42),
        ("cache_prompt", False),
        ("ui", False),
        ("use_color", False),
        # llama-server's -tb defaults to -t.
        ("cpuparams_batch.n_threads", 1),
    ]


def test_threads_batch_given_is_kept() -> None:
    assert xllamacpp_assignments(["-t", "2", "-tb", "1"]) == [
        ("cpuparams.n_threads", 2),
        ("cpuparams_batch.n_threads", 1),
    ]


def test_every_unknown_option_is_named() -> None:
    with pytest.raises(UnsupportedOptions) as info:
        xllamacpp_assignments(["--mlock", "-c", "8", "--rope-scaling", "yarn", "--numa", "x"])
    assert info.value.names == ["--mlock", "--rope-scaling", "--numa"]
    assert "--mlock, --rope-scaling, --numa" in str(info.value)
    assert "backend: binary" in str(info.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-c"], "option -c needs a value"),
        (["-c", "big"], "option -c needs a number, not 'big'"),
        (["--pooling", "max"], "option --pooling takes one of none, mean, cls, last, rank"),
        (["stray"], "not supported"),
    ],
)
def test_bad_values(args: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        xllamacpp_assignments(args)


def test_every_option_names_a_real_commonparams_field() -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    samples = {"int": "3", "float": "0.5", "str": "x", "list": "127.0.0.1", "append": "x"}
    for name, option in OPTIONS.items():
        args = [name]
        if option.kind == "choice":
            args.append(next(iter(option.choices)))
        elif option.kind != "flag":
            args.append(samples[option.kind])
        params = make_params(xllamacpp, xllamacpp_assignments(args))
        *parents, attribute = option.path.split(".")
        target = params
        for parent in parents:
            target = getattr(target, parent)
        assert hasattr(target, attribute), name


def test_a_sampling_option_wins_over_the_models_own_as_on_llama_servers_command_line() -> None:
    assert xllamacpp_assignments(["--temp", "0.9", "--top-k", "50", "-s", "1"]) == [
        ("sampling.temp", 0.9),
        ("sampling.top_k", 50),
        ("sampling.seed", 1),
        ("sampling.user_sampling_config", (1 << 6) | (1 << 1)),
    ]
    # The seed is not one of the settings a GGUF can recommend.
    assert xllamacpp_assignments(["-s", "1"]) == [("sampling.seed", 1)]


def test_stop_strings_add_up_and_the_answer_length_is_set() -> None:
    args = ["-r", "\n\n", "--n-predict", "512", "--reverse-prompt", "User:"]
    assert xllamacpp_assignments(args) == [("n_predict", 512), ("antiprompt", ["\n\n", "User:"])]


def test_the_sampling_bits_reach_real_commonparams() -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    args = ["--temp", "0.9", "--min-p", "0.1", "-r", "a", "-r", "b", "-n", "7"]
    params = make_params(xllamacpp, xllamacpp_assignments(args))
    assert params.sampling.user_sampling_config == (1 << 6) | (1 << 3)
    assert abs(params.sampling.temp - 0.9) < 1e-6
    assert list(params.antiprompt) == ["a", "b"] and params.n_predict == 7
