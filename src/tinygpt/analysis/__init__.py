"""The experiments' reports: a sweep's runs read from their own files, the statistics and figures the
reports share, and one module per experiment with its prose template beside it. Above ``train``."""
