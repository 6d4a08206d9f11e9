/* tests/test_registry.c: the one registry (weft/registry.h): the checks every vtable
 * passes through, kinds a program defines, ids, owners and lookups. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <weft/registry.h>

TestSuite(registry, .init = tu_setup, .fini = tu_teardown);

/* A kind of this test's own: "widget" vtables need a spin(). */
struct widget {
    struct weft_vtable base;
    int (*spin)(void);
    int (*turn)(void); /* appended in "a later release": optional */
};

static int widgets_added;

static int check_widget(const struct weft_vtable *v)
{
    const struct widget *w = (const struct widget *)v;
    return w->spin ? 0 : weft_error_set(WEFT_ERR_PLUGIN, "widget '%s' cannot spin", v->name);
}

static int widget_added(const struct weft_vtable *v, int index)
{
    if (strcmp(v->name, "refused") == 0)
        return weft_error_set(WEFT_ERR_PLUGIN, "widget 'refused' is refused by its kind");
    widgets_added++;
    return 100 + index;
}

static const struct weft_kind widget_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, "widget", struct weft_kind),
    .description = "test widgets",
    .min_size = offsetof(struct widget, turn), /* the first release had spin only */
    .check = check_widget,
    .added = widget_added,
};

static int spin(void)
{
    return 1;
}

static int turn(void)
{
    return 2;
}

static struct widget widget(const char *name)
{
    return (struct widget){.base = WEFT_VTABLE("widget", name, struct widget), .spin = spin};
}

Test(registry, the_core_defines_its_kinds)
{
    const char *const kinds[] = {WEFT_KIND_KIND, WEFT_KIND_PLUGIN, WEFT_KIND_BACKEND,
                                 WEFT_KIND_LAYOUT, WEFT_KIND_API};
    for (size_t i = 0; i < 5; i++)
        cr_assert_not_null(weft_registry_find(WEFT_KIND_KIND, kinds[i]), "%s", kinds[i]);
    /* and the libraries this test links define theirs when they load */
    cr_assert_not_null(weft_registry_find(WEFT_KIND_KIND, WEFT_KIND_MODULE));
    cr_assert_not_null(weft_registry_find(WEFT_KIND_KIND, WEFT_KIND_READER));
    cr_assert_not_null(weft_registry_find(WEFT_KIND_KIND, WEFT_KIND_OPTIMIZER));
}

Test(registry, a_program_defines_a_kind_and_registers_vtables_of_it)
{
    cr_assert_geq(weft_register(&widget_kind), 0, "%s", weft_error_message());
    static struct widget a, b;
    a = widget("a");
    b = widget("b");
    cr_assert_eq(weft_register(&a), 100);
    cr_assert_eq(weft_register(&b), 101, "ids come from the kind's added()");
    cr_assert_eq(weft_register(&a), 100, "the same vtable again returns its id");
    cr_assert_eq(widgets_added, 2);
    cr_assert_eq(weft_registry_count("widget"), 2);
    cr_assert_eq(weft_registry_at("widget", 1), &b);
    cr_assert_null(weft_registry_at("widget", 2));
    cr_assert_eq(weft_registry_find("widget", "a"), &a);
    cr_assert_eq(weft_registry_id(&b), 101);
    cr_assert_str_eq(weft_registry_owner(&a), "", "registered by the program");
    cr_assert_null(weft_registry_owner(&spin), "not a registered vtable");
    cr_assert_eq(weft_registry_id(&spin), -1);
    char text[256];
    weft_registry_describe("widget", "c", text, sizeof text);
    cr_assert_str_eq(text, "a, b");
    weft_registry_describe("widget", "bb", text, sizeof text);
    cr_assert_str_eq(text, "a, b; did you mean 'b'?");
}

Test(registry, every_vtable_passes_the_same_checks)
{
    cr_assert_geq(weft_register(&widget_kind), 0);
    static struct widget w;

    w = widget("old");
    w.base.abi_version = 1;
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "a vtable was built for weft ABI 1, but this weft has ABI 3");

    w = widget("tiny");
    w.base.struct_size = offsetof(struct widget, spin);
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget 'tiny' has struct_size 24, smaller than ABI 3's 32 "
                                     "bytes");

    static struct widget first;
    first = widget("first-release");
    first.base.struct_size = offsetof(struct widget, turn);
    first.turn = turn; /* past its struct_size: as if it were not there */
    cr_assert_geq(weft_register(&first), 0, "the first release's size is accepted");
    cr_assert_not(WEFT_VTABLE_HAS(&first, turn), "a field past struct_size is not there");

    w = widget("no spin");
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget name 'no spin' is not valid");

    w = widget("dizzy");
    w.spin = NULL;
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget 'dizzy' cannot spin");

    w = widget("refused");
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget 'refused' is refused by its kind");
    cr_assert_null(weft_registry_find("widget", "refused"), "a refused vtable is taken out");

    w = widget("gadget");
    w.base.kind = "gadget";
    cr_assert_lt(weft_register(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "gadget 'gadget': unknown kind 'gadget' (known kinds: kind, "
                                     "plugin, backend, layout, api");

    cr_assert_lt(weft_register(NULL), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "the vtable is NULL");
}

Test(registry, a_taken_name_is_refused_and_a_larger_newer_struct_accepted)
{
    cr_assert_geq(weft_register(&widget_kind), 0);
    static struct widget a, a2;
    a = widget("a");
    a2 = widget("a");
    cr_assert_geq(weft_register(&a), 0);
    cr_assert_lt(weft_register(&a2), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget 'a' is already registered");

    static struct {
        struct widget w;
        void *future;
    } newer;
    newer.w = widget("newer");
    newer.w.turn = turn;
    newer.w.base.struct_size = sizeof newer;
    cr_assert_geq(weft_register(&newer.w), 0, "%s", weft_error_message());
    cr_assert(WEFT_VTABLE_HAS(&newer.w, turn));
    cr_assert_eq(newer.w.turn(), 2);
}

Test(registry, check_validates_without_registering)
{
    static struct widget w;
    cr_assert_geq(weft_register(&widget_kind), 0);
    w = widget("checked");
    cr_assert_eq(weft_registry_check(&w), 0, "%s", weft_error_message());
    cr_assert_null(weft_registry_find("widget", "checked"));
    w.spin = NULL;
    cr_assert_lt(weft_registry_check(&w), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "cannot spin");
}

Test(registry, register_all_stops_at_the_first_failure)
{
    static struct widget a, bad, c;
    a = widget("a");
    bad = widget("bad");
    bad.spin = NULL;
    c = widget("c");
    const void *const all[] = {&widget_kind, &a, &bad, &c};
    cr_assert_lt(weft_register_all(4, all), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "widget 'bad' cannot spin");
    cr_assert_not_null(weft_registry_find("widget", "a"));
    cr_assert_null(weft_registry_find("widget", "c"));
}

Test(registry, get_of_an_unknown_name_says_what_is_known)
{
    cr_assert_geq(weft_register(&widget_kind), 0);
    static struct widget a;
    a = widget("alpha");
    weft_register(&a);
    cr_assert_null(weft_registry_get("widget", "alhpa"));
    tu_assert_error(WEFT_ERR_PLUGIN, "no widget 'alhpa' (known: alpha; did you mean 'alpha'?), "
                                     "and no plugin on the search path provides widget:alhpa");
    cr_assert_eq(weft_registry_get("widget", "alpha"), &a);
}
