"""Each lesson's own helpers, one module per lesson (lNN_...); nothing outside its lesson, lab and tests imports them."""
