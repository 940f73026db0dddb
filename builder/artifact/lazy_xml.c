/* builder/artifact/lazy_xml.c — libxml2, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls (S3's XML
 * replies), checked by the compiler against libxml2's headers. */
#include "common/lazylib.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

IB_LAZYLIB (xml_lib, IB_SONAME_XML, "S3 replies (XML)");

IB_LAZY (xml_lib, xmlParserCtxtPtr, xmlCreateMemoryParserCtxt, (const char *a0, int a1), (a0, a1))
IB_LAZY (xml_lib, xmlErrorPtr, xmlCtxtGetLastError, (void *a0), (a0))
IB_LAZY (xml_lib, int, xmlCtxtUseOptions, (xmlParserCtxtPtr a0, int a1), (a0, a1))
IB_LAZY (xml_lib, xmlNodePtr, xmlDocGetRootElement, (const xmlDoc *a0), (a0))
IB_LAZY_VOID (xml_lib, xmlFreeDoc, (xmlDocPtr a0), (a0))
IB_LAZY_VOID (xml_lib, xmlFreeParserCtxt, (xmlParserCtxtPtr a0), (a0))
IB_LAZY_VOID (xml_lib, xmlInitParser, (void), ())
IB_LAZY (xml_lib, int, xmlParseDocument, (xmlParserCtxtPtr a0), (a0))
IB_LAZY_VOID (xml_lib, xmlStopParser, (xmlParserCtxtPtr a0), (a0))
