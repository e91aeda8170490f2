"""The one-pass regex of the verbal grammar before its worst case was cut (commit a833c45),
frozen as data for tests/test_verbal_differential.py: the old and the new must read alike.

`_keyword_regex(DEFAULT_LEVELS)` of tps_tracer/capture/verbal_confidence.py at that commit;
every group of it holds a VALUE (the statement that starts last is the match).
"""

OLD_KEYWORD_REGEX = (
    "(?s:.*)confidence(?:(?<=<confidence)[ \\t]{0,8}>([^<]*)</confidence[ \\t]{0,8}>|(?<=[\\\"']con"
    'fidence)(?:[_ -]?(?:score|level|value))?[\\"\'][ \\t]{0,8}:\\s{0,64}(?=(\\"[^\\"\\n]{0,126}\\"|\'[^'
    "'\\n]{0,126}'|[^\\s,;<}\\]]{0,65}))|(?<![a-z0-9]confidence)(?<![a-z0-9][-_]confidence)(?=[ \\t"
    "\\r\\n_*:=|(\\[?-])(?:(?:[ \\t_-]{1,3}(?:level|score|value|estimate|rating))?(?:(?:[ \\t]{0,3}["
    "(\\[][ \\t]{0,2}(?:[01][ \\t]{0,2}(?:-|to|\\?)[ \\t]{0,2}(?:100|10|5|1)|%|percent|(?:out of|/)["
    " \\t]{0,2}(?:100|10|5))[ \\t]{0,2}[)\\]])?(?:\\*\\*?|__?)?(?:[ \\t]{0,8}[:=|](?:\\*\\*?|__?)?\\s{0,"
    "16}(?!\\s)(?=(?:[\\\"'`*_(\\[?~>]{0,4}[ \\t]{0,2}(?:(?:(?:about|around|approximately|approx\\.?|"
    "roughly|circa|nearly|almost|maybe|perhaps)|(?:at least|at most|more than|less than|over|un"
    "der|above|below)|between)[ \\t]{1,3})?(?:[0-9?]|[-+.][0-9]))|[\\\"'`*_(\\[]{0,4}(?:very\\ high|"
    "very\\ low|moderate|medium|high|low)(?![a-z]))(?=([^\\n<]{0,128}))|(?:[ \\t]{1,8}|[ \\t]{0,8}("
    "?:-{1,2}[ \\t]|\\?)[ \\t]{0,8})(?=[*_`(~<>+0-9.,-])(?=[*_`(]{0,3}(?:[~<>]=?[ \\t]{0,2})?[-+]?("
    "?:[0-9]{1,8}(?:[.,][0-9]{1,8})?(?:[ \\t]{0,2}(?:-|to)[ \\t]{0,2}[0-9]{1,8}(?:[.,][0-9]{1,8})"
    "?)?[ \\t]?(?:%|percent(?![a-z]))|[0-9]{1,8}(?:\\.[0-9]{1,8})?[ \\t]{0,2}(?:/|out of)[ \\t]{0,2"
    "}[0-9]|0?[.,][0-9]|1\\.0))(?=([^\\n<]{0,128})))|[ \\t]{1,3}(?:is|was|of|at)[ \\t]{1,3}(?![ \\t]"
    ")(?=(?:[\\\"'`*_(\\[?~>]{0,4}[ \\t]{0,2}(?:(?:(?:about|around|approximately|approx\\.?|roughly|"
    "circa|nearly|almost|maybe|perhaps)|(?:at least|at most|more than|less than|over|under|abov"
    "e|below)|between)[ \\t]{1,3})?(?:[0-9?]|[-+.][0-9])))(?=([^\\n<]{0,128})))|(?<![^\\n#*_ \\t>+-"
    "][#*_ \\t>+-]{0}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]{1}confidence)(?<![^\\n#*_ \\t>+-][#*"
    "_ \\t>+-]{2}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]{3}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t"
    ">+-]{4}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]{5}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]"
    "{6}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]{7}confidence)(?<![^\\n#*_ \\t>+-][#*_ \\t>+-]{8}c"
    "onfidence)(?<![#*_ \\t>+-]{9}confidence)(?:[ \\t_-]{1,3}(?:level|score|value|estimate|rating"
    "))?(?:[ \\t]{0,3}[(\\[][ \\t]{0,2}(?:[01][ \\t]{0,2}(?:-|to|\\?)[ \\t]{0,2}(?:100|10|5|1)|%|perc"
    "ent|(?:out of|/)[ \\t]{0,2}(?:100|10|5))[ \\t]{0,2}[)\\]])?(?:\\*\\*?|__?)?[ \\t]{0,8}\\r?\\n(?:[ "
    "\\t]{0,8}\\r?\\n){0,8}[ \\t]{0,8}(?![ \\t\\r\\n])(?:[-*+][ \\t]{1,3})?(?![ \\t])(?=[*_`(~<>+0-9.,-]"
    ")(?=[*_`(]{0,3}(?:[~<>]=?[ \\t]{0,2})?[-+]?(?:[0-9]{1,8}(?:[.,][0-9]{1,8})?(?:[ \\t]{0,2}(?:"
    "-|to)[ \\t]{0,2}[0-9]{1,8}(?:[.,][0-9]{1,8})?)?[ \\t]?(?:%|percent(?![a-z]))|[0-9]{1,8}(?:\\."
    "[0-9]{1,8})?[ \\t]{0,2}(?:/|out of)[ \\t]{0,2}[0-9]|0?[.,][0-9]|1\\.0))(?=([^\\n<]{0,128}))))"
).encode("ascii")
