"""Conversion of the original releases: AllenNLP/bilm-tf (`convert`, `original_format`, `releases`) and
ELMoForManyLangs (`convert_efml`, `efml_format`, `efml_releases`), each checked against an independent float64
reimplementation (`parity`, `efml_reference`); both catalogues fetch their files with the resumable HTTP client
`download`. The ``elmo convert`` command.
"""
