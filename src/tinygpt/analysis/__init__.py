"""What every experiment's report uses: a sweep's runs read from their own files, the statistics, figures and prose
templates, the leak alarm's audit and the lessons' figures. Above ``train``; the experiments themselves are
``tinygpt.experiments``, above it."""
