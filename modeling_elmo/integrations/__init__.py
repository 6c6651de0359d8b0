"""ELMo inside other NLP libraries: `spacy` (the ``elmo`` pipeline component). Each module imports its library, an
optional extra of the package, only when used."""
