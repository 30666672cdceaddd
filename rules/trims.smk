localrules:
    trims_plot,
    trims_store_start,
    trims_status,


# The model store runs only while TrIMS targets are built: the last invocation that used it (or
# adopted it from a killed one) stops it when it ends, so nothing stays running that the user did
# not start; an invocation another one still uses it for leaves it running. Its state file stays:
# a TrIMS run that has to execute starts the store again from it, and finished runs are not redone.
onsuccess:
    stop_trims_store(INVOCATION)


onerror:
    stop_trims_store(INVOCATION)


rule trims_store_start:
    output:
        TRIMS_STORE,
    log:
        f"results/logs/cluster/{BACKEND}/trims-store.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=untracked(TRIMS_STORE_SETTINGS),
    shell:
        "repro trims store start --settings {params.settings:q} --state {output:q}"
        " > {log:q} 2>&1"


# Like cluster_status: one temp() file per TrIMS run that has to execute.
rule trims_status:
    input:
        store=ancient(rules.trims_store_start.output[0]),
    output:
        temp(f"results/cluster/{BACKEND}/trims-status/{{trims_job}}.json"),
    log:
        f"results/logs/cluster/{BACKEND}/trims-status/{{trims_job}}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        digest=settings_digest(TRIMS_STORE_SETTINGS),
    shell:
        "repro trims store status --state {input.store:q} --expect {params.digest:q}"
        " -o {output:q} > {log:q} 2>&1"


# Every file of a model is an output: a forced rerun removes them all first (a model directory
# without its manifest is refused as one that may be the user's).
rule trims_generate:
    output:
        f"{config['trims']['asset_store']}/{{model}}/manifest.json",
        f"{config['trims']['asset_store']}/{{model}}/model.onnx",
        f"{config['trims']['asset_store']}/{{model}}/model.params",
    log:
        "results/logs/trims/generate/{model}.log",
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        seed=config["trims"]["seed"],
        assets=output_dir(levels=2),
    shell:
        "repro trims models {wildcards.model:q} --seed {params.seed:q}"
        " --base-path={params.assets:q} > {log:q} 2>&1"


# From a local asset store generated above, or from a GCS bucket (gs://...) filled beforehand
# with `repro trims models NAME --publish gs://...`.
rule trims_fetch:
    input:
        fetch_source(config, ASSETS_IN_GCS),
    output:
        f"{config['trims']['base_path']}/{{model}}/manifest.json",
        f"{config['trims']['base_path']}/{{model}}/model.onnx",
        f"{config['trims']['base_path']}/{{model}}/model.params",
    log:
        "results/logs/trims/fetch/{model}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        asset_store=config["trims"]["asset_store"],
        base_path=output_dir(levels=2),
    shell:
        "repro trims fetch {wildcards.model:q} --asset-store={params.asset_store:q}"
        " --base-path={params.base_path:q} > {log:q} 2>&1"


# TrIMS runs measure latency: each takes every core so no other job disturbs it.
rule trims_compare:
    input:
        store=ancient(rules.trims_store_start.output[0]),
        status=f"results/cluster/{BACKEND}/trims-status/compare-{{model}}.json",
        model=f"{config['trims']['base_path']}/{{model}}/manifest.json",
    output:
        "results/trims/runs/compare/{model}/report.json",
    log:
        "results/logs/trims/compare/{model}.log",
    benchmark:
        "results/benchmarks/trims/compare/{model}.tsv"
    conda:
        ENV
    threads: workflow.cores
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        settings=trims_client_settings(config, "compare"),
        out=output_dir(),
    shell:
        "repro trims experiment compare {wildcards.model:q} --store {input.store:q}"
        " --settings {params.settings:q} --out {params.out:q} > {log:q} 2>&1"


rule trims_distribution:
    input:
        store=ancient(rules.trims_store_start.output[0]),
        status=f"results/cluster/{BACKEND}/trims-status/{{distribution}}-c{{concurrency}}.json",
        models=expand(
            "{base}/{model}/manifest.json",
            base=config["trims"]["base_path"],
            model=TRIMS_MODELS,
        ),
    output:
        "results/trims/runs/distribution/{distribution}-c{concurrency}/report.json",
    log:
        "results/logs/trims/distribution/{distribution}-c{concurrency}.log",
    benchmark:
        "results/benchmarks/trims/distribution/{distribution}-c{concurrency}.tsv"
    conda:
        ENV
    threads: workflow.cores
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        settings=trims_client_settings(config, "distributions"),
        params=by_wildcards(trims_distribution, config, "distribution"),
        models=TRIMS_MODELS,
        out=output_dir(),
    shell:
        "repro trims experiment distribution {wildcards.distribution:q}"
        " --params {params.params:q} --concurrency {wildcards.concurrency:q}"
        " --models {params.models:q} --store {input.store:q}"
        " --settings {params.settings:q} --out {params.out:q} > {log:q} 2>&1"


rule trims_combine:
    input:
        "results/trims/runs/compare/{model}/report.json",
    output:
        "results/traces/trims/compared-{model}.json",
    log:
        "results/logs/trims/combine/{model}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        traces=beside_input(("traces", "original"), ("traces", "shared")),
    shell:
        "repro trace combine {params.traces:q} -o {output:q} > {log:q} 2>&1"


rule trims_summary:
    input:
        compare=expand(
            "results/trims/runs/compare/{model}/report.json", model=TRIMS_MODELS
        ),
        combined=expand(
            "results/traces/trims/compared-{model}.json", model=TRIMS_MODELS
        ),
        distributions=expand(
            "results/trims/runs/distribution/{distribution}-c{concurrency}/report.json",
            distribution=TRIMS_DISTRIBUTIONS,
            concurrency=TRIMS_CONCURRENCY,
        ),
    output:
        "results/summary/trims.json",
    log:
        "results/logs/trims/summary.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    shell:
        "repro trims summary --compare {input.compare:q}"
        " --distributions {input.distributions:q} -o {output:q} > {log:q} 2>&1"


rule trims_plot:
    input:
        "results/summary/trims.json",
    output:
        pdf="plots/{figure}.pdf",
        png="plots/{figure}.png",
    log:
        "results/logs/plot/{figure}.log",
    wildcard_constraints:
        figure=one_of(TRIMS_FIGURES, "no-figures"),
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        style=Settings(config["plots"]["style"]),
    shell:
        "repro trims plot {wildcards.figure:q} --summary {input:q} --style {params.style:q}"
        " --output {output.pdf:q} {output.png:q} > {log:q} 2>&1"
